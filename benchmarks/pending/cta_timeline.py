"""Where the staged forward's time goes, CTA by CTA: a timeline of one call (an experiment, not a tool kept).

Needs the kernels patched with benchmarks/pending/trace.patch (thread 0 of each staged-forward CTA of the
cluster path writes %globaltimer on entry, once its slab has landed, once the cluster's sums have, and after
its stores of y). Builds the project with RMSNORM_TRACE=1, then for each shape calls the RMSNorm module's
forward (no_grad) after an L2 flush, times the call with CUDA events, and reads the timeline back:

- the phases a CTA spends: its slab's copy (entry to landed), the wait for the cluster's sums (landed to
  summed), its stores (summed to done), and a row's life (its first CTA's entry to its last CTA's done);
- the call against its ideal (bytes over the copy ceiling of the same run): how long until the first CTA
  starts writing (fill), how long after the last CTA enters (tail), CTAs in each phase by the microsecond.

    git apply benchmarks/pending/trace.patch && python3 benchmarks/pending/cta_timeline.py
"""

from __future__ import annotations

import ctypes
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHAPES = [(256, 262144, "bfloat16"), (1024, 262144, "bfloat16"), (256, 262144, "float32"),
          (1024, 65536, "bfloat16")]
REPS = 5


def main() -> int:
    os.environ["RMSNORM_KERNEL_DEFINES"] = "RMSNORM_TRACE=1"
    sys.path.insert(0, str(ROOT))
    import torch

    from harness import build
    from harness.bench import DTYPES, copy_ceiling_gbps

    spec, _ = build.project_spec()
    mod = build.build(spec)
    lib = ctypes.CDLL(mod.__file__)
    lib.rmsnorm_trace_read.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    from rmsnorm import RMSNorm

    ceiling = copy_ceiling_gbps()
    print(f"# {torch.cuda.get_device_name()}, copy ceiling {ceiling:.0f} GB/s; trace build of the project")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for m, n, dname in SHAPES:
        dt = DTYPES[dname]
        elem = torch.empty((), dtype=dt).element_size()
        x = torch.randn(m, n, device="cuda", dtype=dt)
        mod_ = RMSNorm(n, eps=1e-6, device="cuda", dtype=dt)
        ideal_us = 2 * m * n * elem / (ceiling * 1e3)
        print(f"\n## {dname} {m} x {n}: ideal {ideal_us:.1f} us (2 M N bytes at the ceiling)")
        with torch.no_grad():
            mod_(x)
            torch.cuda.synchronize()
            best = None
            for rep in range(REPS):
                if lib.rmsnorm_trace_clear() != 0:
                    print("trace clear failed")
                    return 1
                flush.zero_()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                mod_(x)
                b.record()
                torch.cuda.synchronize()
                ev_us = a.elapsed_time(b) * 1e3
                raw = (ctypes.c_uint64 * (8 << 16))()
                rc = lib.rmsnorm_trace_read(ctypes.addressof(raw), ctypes.sizeof(raw))
                if rc != 0:
                    print(f"trace read failed: cudaError {rc}")
                    return 1
                words = list(raw)
                rows = []
                for i in range(len(words) // 8):
                    w = words[8 * i: 8 * i + 8]
                    if w[0] == 0:
                        break
                    rows.append(w)
                ctas = rows
                if not ctas:
                    print("no CTA traced: is the patch applied, and is this shape a cluster's?")
                    return 1
                res = analyse(ctas, ev_us, ideal_us)
                print(f"rep {rep}: " + res["line"])
                if best is None or ev_us < best[0]:
                    best = (ev_us, ctas, res)
            print(best[2]["detail"])
    # Waves: the bfloat16 262,144 forward at M = 7k rows around 256 (35 clusters of 16 fit at once on the
    # H200 at e839fd8's kernels: steps at 245 and 280 would be whole waves), median of 7 calls each.
    print("\n## bfloat16 M x 262144 forward by M (median of 7 calls after an L2 flush, events): M, us, us a row, "
          "fraction of the ceiling")
    n = 262144
    mod_ = RMSNorm(n, eps=1e-6, device="cuda", dtype=torch.bfloat16)
    xs = torch.randn(294, n, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for m in range(203, 295, 7):
            x = xs[:m]
            mod_(x)
            ts = []
            for _ in range(7):
                flush.zero_()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                mod_(x)
                b.record()
                torch.cuda.synchronize()
                ts.append(a.elapsed_time(b) * 1e3)
            us = statistics.median(ts)
            print(f"{m:4d} {us:7.1f} {us / m:6.3f} {2 * m * n * 2 / (us * 1e3) / ceiling:5.3f}")
    return 0


def analyse(ctas: list[list[int]], ev_us: float, ideal_us: float) -> dict:
    t0 = min(c[0] for c in ctas)
    ent = [(c[0] - t0) / 1e3 for c in ctas]
    land = [(c[1] - t0) / 1e3 for c in ctas]
    summ = [(c[2] - t0) / 1e3 for c in ctas]
    done = [(c[3] - t0) / 1e3 for c in ctas]
    span = max(done)
    read = [b - a for a, b in zip(ent, land)]
    wait = [b - a for a, b in zip(land, summ)]
    write = [b - a for a, b in zip(summ, done)]
    clk_read = [c[4] & 0xFFFFFFFF for c in ctas]
    clk_sum = [c[4] >> 32 for c in ctas]
    clk_done = [c[5] for c in ctas]
    sms = {c[6] & 0xFFFFFFFF for c in ctas}
    med = statistics.median
    q = lambda v, p: sorted(v)[min(len(v) - 1, int(p * len(v)))]  # noqa: E731
    ticks = sorted({c[k] for c in ctas for k in range(4)})
    res = min((b - a for a, b in zip(ticks, ticks[1:]) if b > a), default=0)
    line = (f"call {ev_us:.1f} us (events), CTAs' span {span:.1f} us, {len(ctas)} CTAs on {len(sms)} SMs; "
            f"first write at {min(summ):.1f} us, last entry at {max(ent):.1f} us, tail {span - max(ent):.1f} us; "
            f"timer step {res} ns")
    out = [f"best call: {line}",
           f"per CTA (us; median, p90, max): copy in {med(read):.2f} {q(read, .9):.2f} {max(read):.2f} | "
           f"wait for the cluster's sums {med(wait):.2f} {q(wait, .9):.2f} {max(wait):.2f} | "
           f"stores {med(write):.2f} {q(write, .9):.2f} {max(write):.2f}",
           f"per CTA (kcycles; median): copy in {med(clk_read) / 1e3:.2f}, to the sums {med(clk_sum) / 1e3:.2f}, "
           f"to done {med(clk_done) / 1e3:.2f}",
           f"call - ideal = {ev_us - ideal_us:.1f} us; span - ideal = {span - ideal_us:.1f} us",
           "CTAs in each phase by time (us from the first entry): reading / waiting / writing"]
    step = max(1.0, span / 40)
    t = 0.0
    while t < span:
        r = sum(1 for a, b in zip(ent, land) if a <= t < b)
        w = sum(1 for a, b in zip(land, summ) if a <= t < b)
        s = sum(1 for a, b in zip(summ, done) if a <= t < b)
        out.append(f"  {t:6.1f}  {r:5d} {w:5d} {s:5d}")
        t += step
    return {"line": line, "detail": "\n".join(out)}


if __name__ == "__main__":
    sys.exit(main())
