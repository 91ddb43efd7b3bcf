"""Settings of this project's kernels side by side, through the users' path: each variant is the
project built with other values of the kernels' compile-time settings (kernels/rmsnorm_plan.h,
kernels/rmsnorm_device.cuh; rmsnorm._build's RMSNORM_KERNEL_DEFINES), timed by ``harness bench``
(the RMSNorm module, backward through autograd, decode under CUDA graphs) in one run on one GPU,
one variant after another. Prints one table: GB/s and the fraction of the copy ceiling per variant,
the decode times, and each variant's largest error check (a variant that computes wrong is shown
as wrong, not timed).

    python3 benchmarks/variants.py --out .build/variants \\
        "default:" "registers:RMSNORM_FWD_STAGED_FROM=0" "pdl:RMSNORM_PDL=1"
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_variants(specs: list[str], prog: str) -> list[tuple[str, str]]:
    """(NAME, DEFINES) of each NAME:DEFINES argument; a clear error for one without a name."""
    parsed = []
    for spec in specs:
        name, _, defines = spec.partition(":")
        if not name:
            raise SystemExit(f"{prog}: expected NAME:DEFINES, but got {spec!r}")
        parsed.append((name, defines))
    return parsed


def build_variants(parsed: list[tuple[str, str]]) -> list[str]:
    """Each variant's extension built (``harness build`` with its defines), all side by side; the names whose
    build failed."""
    builds = [subprocess.Popen([sys.executable, "-m", "harness", "build"], cwd=ROOT,
                               env=dict(os.environ, RMSNORM_KERNEL_DEFINES=defines), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL) for _, defines in parsed]
    return [name for (name, _), b in zip(parsed, builds) if b.wait() != 0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variants", nargs="+", help="NAME:DEFINES, DEFINES space- or comma-separated (empty: the defaults)")
    p.add_argument("--dtypes", default="bfloat16,float32")
    p.add_argument("--n", default="1024,4096,16384,65536,262144")
    p.add_argument("--directions", default="forward,backward")
    p.add_argument("--no-decode", action="store_true", help="leave out the decode shapes")
    p.add_argument("--out", default=str(ROOT / ".build" / "variants"))
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    parsed = parse_variants(args.variants, "variants")
    # Every variant built first, side by side (the builds are the slow part), then timed one by one.
    build_variants(parsed)
    runs = []
    for name, defines in parsed:
        env = dict(os.environ, RMSNORM_KERNEL_DEFINES=defines)
        d = out / name
        cmd = [sys.executable, "-m", "harness", "bench", "--peers", "", "--dtypes", args.dtypes, "--n", args.n,
               "--directions", args.directions, "--out", str(d)] + (["--no-decode"] if args.no_decode else [])
        print(f"variants: {name} ({defines or 'defaults'})", file=sys.stderr, flush=True)
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        (out / f"{name}.log").write_text(r.stdout + r.stderr)
        if r.returncode != 0:
            print(f"variants: {name} failed (exit {r.returncode}); see {out / f'{name}.log'}", file=sys.stderr)
            runs.append((name, defines, None))
            continue
        runs.append((name, defines, json.loads((d / "bench.json").read_text())))
    print(table(runs))
    return 0 if all(data is not None for _, _, data in runs) else 1


def table(runs) -> str:
    ok = [(n, d, data) for n, d, data in runs if data is not None]
    lines = ["| variant | settings | copy GB/s |", "|---|---|---|"]
    lines += [f"| {n} | {d or 'defaults'} | {data['meta']['copy_gbps']:.0f} |" for n, d, data in ok]
    lines += [f"| {n} | {d or 'defaults'} | failed |" for n, d, data in runs if data is None]
    if not ok:
        return "\n".join(lines)
    keys = []
    for _, _, data in ok:
        for r in data["results"]:
            if r["path"] != "users":
                continue
            k = (r["direction"], r["dtype"], r["n"], r["m"])
            if k not in keys:
                keys.append(k)
    lines += ["", "| direction | dtype | M x N | " + " | ".join(n for n, _, _ in ok) + " |",
              "|---|---|---|" + "---|" * len(ok)]
    for k in keys:
        cells = []
        for _, _, data in ok:
            r = next((r for r in data["results"] if r["path"] == "users"
                      and (r["direction"], r["dtype"], r["n"], r["m"]) == k), None)
            if r is None:
                cells.append("-")
            elif r["error"]:
                cells.append("wrong" if "max error" in r["error"] else "fails")
            elif k[0] == "decode":
                cells.append(f"{r['extra']['us']:.2f} us")
            else:
                cells.append(f"{r['gbps']:.0f} ({r['gbps'] / data['meta']['copy_gbps']:.2f})")
        lines.append(f"| {k[0]} | {k[1]} | {k[3]} x {k[2]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
