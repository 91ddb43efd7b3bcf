"""What the bench's copy ceiling leaves out at the bench's own sizes: the same bytes moved by the
simplest kernels torch has, timed the bench's way (``harness.tools.bench.time_ms``: the L2 flushed by
zeroing 256 MB before each call, events around it), beside this project's forward and backward at
each N. ``copy`` moves a forward's bytes (read M·N elements, write M·N: ``dst.copy_(src)``),
``add`` a backward's (read 2·M·N, write M·N: ``torch.add(a, b, out=c)``). Each is timed at M·N =
2^26 (the bench's size) and 2^27, which splits a call's time into a fixed part and a rate:
t = fixed + bytes / rate. ``copy, read flush`` is the copy with the L2 flushed by reading 256 MB
instead of zeroing it, so that no dirty line of the flush is left to write back during the timed
call. ``--peers`` times peers' users' paths the same way (``harness bench``'s names), so that a
peer's lead at a shape can be put down to its fixed part or its rate. ``--log2-elements A-B`` times
every size from 2^A to 2^B (doubling) and fits the line by least squares. ``--spans`` adds a row for
each, its "(kernels)" row: the span of its kernels on the GPU as the profiler records them (the first
kernel's start to the last one's end, the median of 20 calls, each after the same flush), which leaves
out what the events time around the kernels: a fixed part that stays in that row is inside the
kernels (the first wave's fill, the last wave's drain), one that goes is the launch. A script, not a
test; its output is committed under benchmarks/results/ (h200/ceilings-h200.txt).

  python3 benchmarks/ceilings.py [--dtypes bfloat16,float32] [--n 1024,4096,16384,65536,262144] [--peers liger]
  python3 benchmarks/ceilings.py --n 65536,131072,262144 --log2-elements 24-28 --spans
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

def _read_flush_ms(fn, reps: int = 50) -> float:
    """Median ms of fn with the L2 flushed by a read of 256 MB (no dirty lines left behind), in the bench's
    timing loop."""
    import torch

    from harness.tools import bench

    cache = torch.ones(64 << 20, dtype=torch.int32, device="cuda")
    return bench.flushed_ms(fn, cache.sum, reps=reps, warmup=3)


def _fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(fixed us, rate GB/s) of t = fixed + bytes / rate, the least-squares line through (bytes, ms) points."""
    slope, intercept = statistics.linear_regression([b for b, _ in points], [t for _, t in points])  # ms a byte, ms
    return intercept * 1e3, 1 / (slope * 1e-3) / 1e9


def _span_ms(fn, flush, reps: int = 20) -> float:
    """Median ms from the first kernel's start to the last one's end of fn, each call after flush() (torch's
    fill kernel or a memset, told apart so), as the profiler records them."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            flush()
            fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    # Kernels, and the copy engine's copies (a contiguous copy_ is one); the flush is a fill kernel or a memset.
    kernels = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                     key=lambda e: float(e["ts"]))
    spans, call = [], []
    for e in kernels + [None]:
        if e is None or e["cat"] == "gpu_memset" or "FillFunctor" in e["name"]:
            if call:
                spans.append(max(float(k["ts"]) + float(k["dur"]) for k in call) - float(call[0]["ts"]))
            call = []
        else:
            call.append(e)
    if len(spans) != reps:
        raise RuntimeError(f"expected {reps} calls between the flushes in the profile, but found {len(spans)}")
    return statistics.median(spans) * 1e-3


def _sizes(text: str) -> tuple[int, ...]:
    """M·N of each size: --log2-elements A-B, every power of two from 2^A to 2^B."""
    lo, _, hi = text.partition("-")
    try:
        a, b = int(lo), int(hi)
    except ValueError:
        raise SystemExit(f"ceilings: --log2-elements: expected A-B (e.g. 24-28), but got {text!r}")
    if not 10 <= a < b <= 30:
        raise SystemExit(f"ceilings: --log2-elements: expected two or more sizes from 2^10 to 2^30, but got {text!r}")
    return tuple(1 << k for k in range(a, b + 1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--n", default="1024,4096,16384,65536,262144")
    ap.add_argument("--peers", default="", help="peers' users' paths timed beside the project's (e.g. liger)")
    ap.add_argument("--log2-elements", default="26-27", help="M·N from 2^A to 2^B, doubling (default 26-27)")
    ap.add_argument("--spans", action="store_true", help="each row also as its kernels' span under the profiler")
    args = ap.parse_args()
    sizes = _sizes(args.log2_elements)
    import torch

    from harness.tools import bench, bench_impls

    if not torch.cuda.is_available():
        raise SystemExit("ceilings: needs a CUDA GPU, but torch.cuda.is_available() is False")
    impls, skipped = bench_impls.implementations(["project"], [p for p in args.peers.split(",") if p])
    impls = [i for i in impls if i.path == bench.USERS]  # the users' paths: the module, autograd
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
    ns = [int(n) for n in args.n.split(",")]
    ceiling = bench.copy_ceiling_gbps()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; copy ceiling (1 GiB, the bench's): "
          f"{ceiling:.0f} GB/s\n")
    for line in skipped:
        print(f"not timed: {line}\n")
    cols = " | ".join(f"2^{k.bit_length() - 1}" for k in sizes)
    print("Each cell: GB/s (fraction of the copy ceiling) at each M·N; then the least-squares fit "
          "t = fixed + bytes / rate: fixed us, rate GB/s (its fraction of the ceiling)."
          + (" A '(kernels)' row: the span of the kernels on the GPU under the profiler, the same fit." if args.spans
             else "") + "\n")
    print(f"| dtype | what | {cols} | fixed us | rate |")
    print("|---|---|" + "---|" * len(sizes) + "---|---|")
    flush = bench._flush_buffer()
    spans_failed = ""

    def timed(fn) -> tuple[float, float | None]:
        """(the events' ms, the kernels' span ms or None) of fn."""
        nonlocal spans_failed
        ms = bench.time_ms(fn)
        if not args.spans or spans_failed:
            return ms, None
        try:
            return ms, _span_ms(fn, flush.zero_)
        except Exception as e:  # noqa: BLE001 - the events' rows stand without it
            spans_failed = f"{type(e).__name__}: {e}"
            return ms, None

    for dtype in dtypes:
        size = torch.finfo(dtype).bits // 8
        rows = []
        copy_t, add_t, rcopy_t = [], [], []
        for elements in sizes:
            a = torch.randn(elements, device="cuda", dtype=dtype)
            b = torch.randn(elements, device="cuda", dtype=dtype)
            c = torch.empty_like(a)
            copy_t.append(timed(lambda: c.copy_(a)))
            rcopy_t.append((_read_flush_ms(lambda: c.copy_(a)), None))
            add_t.append(timed(lambda: torch.add(a, b, out=c)))
            del a, b, c
        rows.append(("copy", 2, copy_t))
        rows.append(("copy, read flush", 2, rcopy_t))
        rows.append(("add", 3, add_t))
        for n in ns:
            for impl in impls:
                fwd_t, bwd_t = [], []
                try:
                    for elements in sizes:
                        x = torch.randn(elements // n, n, device="cuda", dtype=dtype)
                        calls = impl.setup(x, torch.randn(n, device="cuda", dtype=dtype), torch.randn_like(x))
                        fwd_t.append(timed(calls.forward))
                        bwd_t.append(timed(calls.backward))
                        del x, calls
                except Exception as e:  # noqa: BLE001 - a peer that refuses a shape: said, not timed
                    print(f"| {str(dtype).replace('torch.', '')} | {impl.name} N={n} | {bench.why_failed(e)} |"
                          + " |" * (len(sizes) + 1))
                    continue
                rows.append((f"{impl.name} forward N={n}", 2, fwd_t))
                rows.append((f"{impl.name} backward N={n}", 3, bwd_t))
        for what, streams, timings in rows:
            for label, k in ((what, 0), (f"{what} (kernels)", 1)):
                ts = [t[k] for t in timings]
                if any(t is None for t in ts):
                    continue
                moved = [streams * e * size for e in sizes]
                gbps = [b / (t * 1e-3) / 1e9 for b, t in zip(moved, ts)]
                fixed, rate = _fit(list(zip(moved, ts)))
                print(f"| {str(dtype).replace('torch.', '')} | {label} | "
                      + " | ".join(f"{g:.0f} ({g / ceiling:.2f})" for g in gbps)
                      + f" | {fixed:.1f} | {rate:.0f} ({rate / ceiling:.2f}) |", flush=True)
        torch.cuda.empty_cache()
    if spans_failed:
        print(f"\nThe kernels' spans were not measured: {spans_failed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
