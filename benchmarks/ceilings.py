"""What the bench's copy ceiling leaves out at the bench's own sizes: the same bytes moved by the
simplest kernels torch has, timed the bench's way (``harness.bench.time_ms``: the L2 flushed by
zeroing 256 MB before each call, events around it), beside this project's forward and backward at
each N. ``copy`` moves a forward's bytes (read M·N elements, write M·N: ``dst.copy_(src)``),
``add`` a backward's (read 2·M·N, write M·N: ``torch.add(a, b, out=c)``). Each is timed at M·N =
2^26 (the bench's size) and 2^27, which splits a call's time into a fixed part and a rate:
t = fixed + bytes / rate. ``copy, read flush`` is the copy with the L2 flushed by reading 256 MB
instead of zeroing it, so that no dirty line of the flush is left to write back during the timed
call. ``--peers`` times peers' users' paths the same way (``harness bench``'s names), so that a
peer's lead at a shape can be put down to its fixed part or its rate. A script, not a test; its output
is committed beside it (benchmarks/ceilings-h200.txt).

  python3 benchmarks/ceilings.py [--dtypes bfloat16,float32] [--n 1024,4096,16384,65536,262144] [--peers liger]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIZES = (1 << 26, 1 << 27)


def _read_flush_ms(fn, reps: int = 50) -> float:
    """Median ms of fn with the L2 flushed by a read of 256 MB (no dirty lines left behind)."""
    import torch

    cache = torch.ones(64 << 20, dtype=torch.int32, device="cuda")
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        cache.sum()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def _fit(b1: float, t1: float, b2: float, t2: float) -> tuple[float, float]:
    """(fixed us, rate GB/s) of t = fixed + bytes / rate through two points (bytes, ms)."""
    rate = (b2 - b1) / ((t2 - t1) * 1e-3) / 1e9
    return t1 * 1e3 - b1 / rate / 1e3, rate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--n", default="1024,4096,16384,65536,262144")
    ap.add_argument("--peers", default="", help="peers' users' paths timed beside the project's (e.g. liger)")
    args = ap.parse_args()
    import torch

    from harness import bench

    if not torch.cuda.is_available():
        raise SystemExit("ceilings: needs a CUDA GPU, but torch.cuda.is_available() is False")
    impls, skipped = bench.implementations(["project"], [p for p in args.peers.split(",") if p])
    impls = [i for i in impls if i.path == bench.USERS]  # the users' paths: the module, autograd
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
    ns = [int(n) for n in args.n.split(",")]
    ceiling = bench.copy_ceiling_gbps()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; copy ceiling (1 GiB, the bench's): "
          f"{ceiling:.0f} GB/s\n")
    for line in skipped:
        print(f"not timed: {line}\n")
    print("Each cell: GB/s (fraction of the copy ceiling) at M·N = 2^26 | at 2^27; then the fit "
          "t = fixed + bytes / rate: fixed us, rate GB/s (its fraction of the ceiling).\n")
    print("| dtype | what | 2^26 | 2^27 | fixed us | rate |")
    print("|---|---|---|---|---|---|")
    for dtype in dtypes:
        size = torch.finfo(dtype).bits // 8
        rows = []
        copy_t, add_t, rcopy_t = [], [], []
        for elements in SIZES:
            a = torch.randn(elements, device="cuda", dtype=dtype)
            b = torch.randn(elements, device="cuda", dtype=dtype)
            c = torch.empty_like(a)
            copy_t.append(bench.time_ms(lambda: c.copy_(a)))
            rcopy_t.append(_read_flush_ms(lambda: c.copy_(a)))
            add_t.append(bench.time_ms(lambda: torch.add(a, b, out=c)))
            del a, b, c
        rows.append(("copy", 2, copy_t))
        rows.append(("copy, read flush", 2, rcopy_t))
        rows.append(("add", 3, add_t))
        for n in ns:
            for impl in impls:
                fwd_t, bwd_t = [], []
                try:
                    for elements in SIZES:
                        x = torch.randn(elements // n, n, device="cuda", dtype=dtype)
                        calls = impl.setup(x, torch.randn(n, device="cuda", dtype=dtype), torch.randn_like(x))
                        fwd_t.append(bench.time_ms(calls.forward))
                        bwd_t.append(bench.time_ms(calls.backward))
                        del x, calls
                except Exception as e:  # noqa: BLE001 - a peer that refuses a shape: said, not timed
                    print(f"| {str(dtype).replace('torch.', '')} | {impl.name} N={n} | {bench.why_failed(e)} | | | |")
                    continue
                rows.append((f"{impl.name} forward N={n}", 2, fwd_t))
                rows.append((f"{impl.name} backward N={n}", 3, bwd_t))
        for what, streams, (t1, t2) in rows:
            b1, b2 = streams * SIZES[0] * size, streams * SIZES[1] * size
            g1, g2 = b1 / (t1 * 1e-3) / 1e9, b2 / (t2 * 1e-3) / 1e9
            fixed, rate = _fit(b1, t1, b2, t2)
            print(f"| {str(dtype).replace('torch.', '')} | {what} | {g1:.0f} ({g1 / ceiling:.2f}) | {g2:.0f} "
                  f"({g2 / ceiling:.2f}) | {fixed:.1f} | {rate:.0f} ({rate / ceiling:.2f}) |", flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
