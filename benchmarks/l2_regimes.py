"""Is a forward's speed its own, or the L2 state the call finds? Each variant of this project's kernels
(NAME:DEFINES, as benchmarks/variants.py takes them: built with those compile-time settings) is timed through
the users' path (the RMSNorm module under no_grad) four ways, as fractions of the copy ceiling:

  same         as ``harness bench`` times it: the same x every call, the L2 flushed by zeroing 256 MB before each
  rot          the same flush, but each call on the next of 4 distinct x, so that nothing of this call's x can
               be in L2 from the call before
  rot-noflush  4 distinct x, no flush: the call before leaves its y (dirty) in L2
  pair         rot-noflush with a kernel after the forward that reads and writes y (``y.mul_(2)``):
               microseconds for the two, so that what the forward leaves in L2 for the next kernel shows

With --compiled, torch.compile of LlamaRMSNorm is timed beside the first variant. A script, not a test; its
output for the evict-last forward is in benchmarks/results/h200/variants-h200.md (the stop of e839fd8).

  python3 benchmarks/l2_regimes.py "default:" "off:RMSNORM_FWD_X_EVICT_LAST=0" [--compiled]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from variants import build_variants, parse_variants  # noqa: E402  (benchmarks/, beside this script)

ROOT = Path(__file__).resolve().parent.parent
SHAPES = [(16384, 4096, "bfloat16"), (16384, 4096, "float32"), (1024, 65536, "bfloat16")]
BUFFERS = 4
REPS = 48


def child(name: str, with_compiled: bool) -> None:
    import torch

    sys.path.insert(0, str(ROOT))
    from harness.tools.bench import _compiled_module, _project_module, copy_ceiling_gbps, time_ms

    ceiling = copy_ceiling_gbps()
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")

    def rot_ms(fn, xs, flush=True):
        for x in xs:
            fn(x)
        torch.cuda.synchronize()
        times = []
        for r in range(REPS):
            if flush:
                cache.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn(xs[r % len(xs)])
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        return statistics.median(times)

    for m, n, dt in SHAPES:
        dtype = getattr(torch, dt)
        xs = [torch.randn(m, n, device="cuda", dtype=dtype) for _ in range(BUFFERS)]
        gb = 2 * m * n * xs[0].element_size() / 1e9
        impls = [(name, _project_module)] + ([("torch.compile", _compiled_module)] if with_compiled else [])
        for label, make in impls:
            mod, _ = make(n, dtype)
            with torch.no_grad():
                same = time_ms(lambda: mod(xs[0]))
                rot = rot_ms(mod, xs)
                nof = rot_ms(mod, xs, flush=False)
                pair = rot_ms(lambda x: mod(x).mul_(2), xs, flush=False)

            def frac(ms):
                return gb / (ms * 1e-3) / ceiling

            print(f"{label:14s} {dt:9s} {m}x{n}: same {frac(same):.3f}  rot {frac(rot):.3f}  rot-noflush "
                  f"{frac(nof):.3f}  with y*2 after (us) {pair * 1e3:.1f}", flush=True)


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3] == "1")
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variants", nargs="+", help="NAME:DEFINES, DEFINES space- or comma-separated (empty: the defaults)")
    p.add_argument("--compiled", action="store_true", help="torch.compile of LlamaRMSNorm beside the first variant")
    args = p.parse_args(argv)
    parsed = parse_variants(args.variants, "l2_regimes")
    # Every variant built first, side by side, then timed one after another, each in its own process.
    failed = build_variants(parsed)
    if failed:
        raise SystemExit(f"l2_regimes: the build failed for {', '.join(failed)} (python3 -m harness build says why)")
    rc = 0
    for i, (name, d) in enumerate(parsed):
        print(f"# {name} ({d or 'defaults'})", flush=True)
        r = subprocess.run([sys.executable, __file__, "--child", name, "1" if args.compiled and i == 0 else "0"],
                           cwd=ROOT, env=dict(os.environ, RMSNORM_KERNEL_DEFINES=d))
        rc = rc or r.returncode
    return rc


if __name__ == "__main__":
    sys.exit(main())
