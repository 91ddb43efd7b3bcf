"""Is a shape's shortfall from the copy a cost a call pays once, or the kernel's steady speed? This project's
RMSNorm, through the users' path (the module under no_grad forward, torch.autograd.grad backward) and timed as
``harness bench`` times it (the lower of two medians, L2 flushed before every call), at M x N for M * N = 2^24 to
2^28 elements, beside a device-to-device copy of x's bytes timed the same way. A straight line through each
series' times against the bytes it moves, t = fixed + bytes / steady, splits the two:

  fixed   microseconds a call costs whatever its size (launch, the first wave's fill, the last wave's drain)
  steady  the GB/s of the line's slope, as a fraction of the 1 GiB copy ceiling of ``harness bench``

Each series is timed a second way, its "(kernels)" row: the span of its kernels on the GPU as the profiler
records them (the first kernel's start to the last one's end, the median of 20 calls, each after the same
flush), which leaves out what the events time around the kernels. A fixed cost that stays in that row is
inside the kernels (the first wave's fill, the last wave's drain); one that goes is the launch. The fractions
at each size are printed too (2^26 is the bench's size). A script, not a test; its output on the
H200 is benchmarks/fixed-cost-h200.md.

  python3 benchmarks/fixed_cost.py [--dtypes bfloat16,float32] [--n 4096,65536,262144] [--log2-elements 24-28]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (x, y) points."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - slope * mx, slope


def kernel_span_s(fn, flush, reps: int = 20) -> float:
    """Median seconds from the first kernel's start to the last one's end of fn, each call after flush() (torch's
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
    return statistics.median(spans) * 1e-6


def parse_range(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    try:
        lo_i, hi_i = int(lo), int(hi or lo)
    except ValueError:
        raise SystemExit(f"fixed_cost: --log2-elements: expected A-B (e.g. 24-28), but got {text!r}")
    if not 10 <= lo_i <= hi_i <= 30 or hi_i - lo_i < 1:
        raise SystemExit(f"fixed_cost: --log2-elements: expected two or more sizes from 2^10 to 2^30, but got {text!r}")
    return list(range(lo_i, hi_i + 1))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtypes", default="bfloat16,float32")
    p.add_argument("--n", default="4096,65536,262144")
    p.add_argument("--log2-elements", default="24-28", help="M * N from 2^A to 2^B, doubling")
    args = p.parse_args(argv)
    sizes = parse_range(args.log2_elements)
    ns = [int(v) for v in args.n.split(",") if v]

    import torch

    sys.path.insert(0, str(ROOT))
    from harness import ops
    from harness.bench import DTYPES, _flush_buffer, _module_impl, _project_module, copy_ceiling_gbps, time_ms

    if not torch.cuda.is_available():
        raise SystemExit("fixed_cost: expected a CUDA device, but torch sees none")
    for d in args.dtypes.split(","):
        if d not in DTYPES:
            raise SystemExit(f"fixed_cost: --dtypes: expected names from {', '.join(DTYPES)}, but got {d!r}")
    ops.extension()
    impl = _module_impl("project", _project_module, "rmsnorm.RMSNorm")
    ceiling = copy_ceiling_gbps()
    gen = torch.Generator(device="cuda").manual_seed(0)
    cache = _flush_buffer()
    spans_failed = ""
    t0 = time.monotonic()
    print(f"Copy ceiling (1 GiB copy) measured in this run: {ceiling:.0f} GB/s. Cells: fraction of it at "
          f"M * N = 2^{sizes[0]} ... 2^{sizes[-1]}; fixed: us a call; steady: the line's GB/s over the ceiling.\n")
    print("| dtype | N | series | " + " | ".join(f"2^{k}" for k in sizes) + " | fixed us | steady |")
    print("|---|---|---|" + "---|" * len(sizes) + "---|---|")
    for dname in args.dtypes.split(","):
        dtype = DTYPES[dname]
        for n in ns:
            names = ("copy", "forward", "backward")
            series: dict[str, list[tuple[float, float]]] = {k: [] for name in names for k in (name, f"{name} (kernels)")}
            for k in sizes:
                m = max(1, (1 << k) // n)
                x = torch.randn(m, n, device="cuda", dtype=dtype, generator=gen)
                w = (1 + 0.1 * torch.randn(n, device="cuda", generator=gen)).to(dtype)
                dy = torch.randn(m, n, device="cuda", dtype=dtype, generator=gen)
                y = torch.empty_like(x)
                calls = impl.setup(x, w, dy)
                nbytes = m * n * x.element_size()
                for name, fn, moved in (("copy", lambda: y.copy_(x), 2 * nbytes),
                                        ("forward", calls.forward, 2 * nbytes),
                                        ("backward", calls.backward, 3 * nbytes)):
                    ms = min(time_ms(fn), time_ms(fn))
                    series[name].append((moved, ms * 1e-3))
                    if not spans_failed:
                        try:
                            series[f"{name} (kernels)"].append((moved, kernel_span_s(fn, cache.zero_)))
                        except Exception as e:  # the events' table stands without it
                            spans_failed = f"{type(e).__name__}: {e}"
                print(f"fixed_cost: {dname} {m}x{n} done ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
                del x, w, dy, y, calls
                torch.cuda.empty_cache()
            for name, pts in series.items():
                if len(pts) != len(sizes):
                    continue
                fracs = [moved / s / 1e9 / ceiling for moved, s in pts]
                a, b = fit(pts)
                print(f"| {dname} | {n} | {name} | " + " | ".join(f"{f:.3f}" for f in fracs)
                      + f" | {a * 1e6:.1f} | {1 / b / 1e9 / ceiling:.3f} |", flush=True)
    if spans_failed:
        print(f"\nThe kernels' spans were not measured: {spans_failed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
