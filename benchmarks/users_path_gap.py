"""Whether the bench's users' path times the host: each implementation's backward (or forward) as
``harness bench`` times it (the L2 flushed before each call, events around it, the host free to run
ahead), beside the same with the GPU given a head start before each call (a sleep kernel of
--head-us after the flush), and the host's own time to enqueue one call. Where the host takes
longer to enqueue a call than the GPU takes to run the flush and the call, the GPU waits for it and
the wait is timed; the head start lets the host get ahead, so the second figure is the GPU's time
alone. A script, not a test; its output is committed under benchmarks/results/ (h200/users-path-gap-h200.txt).

  python3 benchmarks/users_path_gap.py [--peers torch,liger] [--shapes bfloat16:1024,...] [--head-us 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _timed(fn, head_cycles: int, reps: int) -> tuple[float, float]:
    """(median ms on the GPU, median us of host time a call), the bench's way: every call's events
    recorded first, one synchronisation at the end."""
    import torch

    from harness.tools import bench

    cache = bench._flush_buffer()
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    host = []
    for i in range(reps):
        cache.zero_()
        if head_cycles:
            torch.cuda._sleep(head_cycles)
        starts[i].record()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e6)
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)), statistics.median(host)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", default="torch,liger")
    ap.add_argument("--shapes", default="bfloat16:1024,bfloat16:4096,bfloat16:65536,float32:65536",
                    help="DTYPE:N, comma-separated (M = 2^26 / N)")
    ap.add_argument("--direction", choices=("forward", "backward"), default="backward")
    ap.add_argument("--head-us", type=float, default=300.0, help="the GPU's head start before each call")
    ap.add_argument("--reps", type=int, default=100)
    args = ap.parse_args()
    if args.head_us <= 0 or args.reps < 1:
        ap.error(f"expected --head-us > 0 and --reps >= 1, but got {args.head_us} and {args.reps}")
    import torch

    from harness.tools import bench_impls

    if not torch.cuda.is_available():
        print("users_path_gap: needs a CUDA GPU", file=sys.stderr)
        return 2
    impls, skipped = bench_impls.implementations(["project"], [p for p in args.peers.split(",") if p])
    head_cycles = int(args.head_us * 1980)  # cycles of a 1.98 GHz clock (an H200's boost): about --head-us
    print(f"# {args.direction}: the bench's timing, and the same with a {args.head_us:.0f} us head start; "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.reps} calls a figure")
    for line in skipped:
        print(f"# not run: {line}")
    print("| dtype | M x N | implementation | path | as the bench times it, us | with the head start, us | "
          "host time a call, us |")
    print("|---|---|---|---|---|---|---|")
    for spec in args.shapes.split(","):
        dtype_name, _, n_text = spec.partition(":")
        dtype, n = getattr(torch, dtype_name), int(n_text)
        m = (1 << 26) // n
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=dtype, generator=gen)
        w = torch.randn(n, device="cuda", dtype=dtype, generator=gen)
        dy = torch.randn(m, n, device="cuda", dtype=dtype, generator=gen)
        for impl in impls:
            try:
                calls = impl.setup(x, w, dy)
                fn = calls.backward if args.direction == "backward" else calls.forward
                plain, host = _timed(fn, 0, args.reps)
                ahead, _ = _timed(fn, head_cycles, args.reps)
                print(f"| {dtype_name} | {m} x {n} | {impl.name} | {impl.path} | {plain * 1e3:.1f} | "
                      f"{ahead * 1e3:.1f} | {host:.1f} |", flush=True)
            except Exception as e:  # a peer that cannot run this shape: said, not timed
                print(f"| {dtype_name} | {m} x {n} | {impl.name} | {impl.path} | {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:80]} | - | - |", flush=True)
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
