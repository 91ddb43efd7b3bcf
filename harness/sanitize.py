"""The compute-sanitizer lane: memcheck, racecheck, initcheck and synccheck over a sampled set
of cases, with PyTorch's caching allocator off and -lineinfo builds.

  python -m harness sanitize [--target T] [--tools memcheck,racecheck] [--cases 24]

runs ``compute-sanitizer --tool TOOL python -m harness sanitize --inner ...`` for each tool; the
inner run loads the target in-process (no worker, so the sanitizer sees every kernel) and
runs the forward and backward laws on the sample.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time

from .cases import LAYOUTS, Case, layout_possible

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
# Row lengths, in an order where a short sample already meets every path: CTA-wide reductions
# (1024), a staged row in shared memory (16384), odd and vector-boundary sizes, a cluster (65536).
SAMPLE_N = (1024, 7, 16384, 33, 4097, 1, 8193, 127, 769, 3, 65536, 9, 257, 8, 31, 4095)


def sample(count: int, seed: int = 0) -> list[Case]:
    """A fixed, varied sample: every dtype, weight dtype and layout, odd and boundary sizes."""
    rng = random.Random(seed)
    out = []
    dtypes = ("float32", "bfloat16", "float16", "float64")
    for i in range(count):
        n = SAMPLE_N[i % len(SAMPLE_N)]
        rows = rng.choice((1, 2, 3, 17, 64))
        shape = (rows, n) if i % 3 else (2, max(1, rows // 2), n)
        dtype = dtypes[i % 4]
        layouts = [l for l in LAYOUTS if layout_possible(l, shape)]
        out.append(Case(shape=shape, dtype=dtype, weight_dtype=rng.choice((dtype, "float32")),
                        eps=rng.choice((1e-6, 1e-5, 0.1)), layout=layouts[i % len(layouts)],
                        grad_layout=rng.choice(layouts), pattern="normal", seed=rng.randrange(2**31)))
    return out


def inner(spec: str, count: int) -> int:
    from . import laws
    from .target import Crashed, LawFailure, Rejected, load

    t = load(spec, "cuda", strict=False)
    bad = 0
    for case in sample(count):
        for law in ("forward_matches_reference", "backward_matches_reference"):
            if law.startswith("backward") and not t.has_backward:
                continue
            try:
                laws.run_law(t, law, case)
            except Rejected:
                pass
            except (LawFailure, Crashed) as e:
                bad += 1
                print(f"sanitize sample: {law} failed: {str(e).splitlines()[0]}", flush=True)
    print(f"sanitize sample: {count} cases run, {bad} law failure(s) (the gate judges those)", flush=True)
    return 0


def summary_line(lines: list[str]) -> str:
    """compute-sanitizer's count ("ERROR SUMMARY: 22 errors", "RACECHECK SUMMARY: 20 hazards
    displayed ..."), not the note that may follow it ("ERROR SUMMARY: 2 errors were not printed")."""
    return next((l for l in reversed(lines) if "SUMMARY:" in l and "not printed" not in l), lines[-1] if lines else "")


def main(spec: str, tools: list[str], count: int) -> int:
    exe = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not os.path.exists(exe):
        print("rmsnorm sanitize: compute-sanitizer not found; it comes with the CUDA toolkit", file=sys.stderr)
        return 2
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1", RMSNORM_LINEINFO="1")
    # Build first (outside the sanitizer, which would slow the compiler's own CUDA use).
    subprocess.run([sys.executable, "-m", "harness", "build", "--target", spec], env=env, check=True)
    results = []
    for tool in tools:
        if tool not in TOOLS:
            raise ValueError(f"unknown sanitizer tool {tool!r}; expected some of {TOOLS}")
        cmd = [exe, "--tool", tool, "--error-exitcode", "99", "--print-limit", "20"]
        if tool == "memcheck":
            cmd += ["--leak-check", "no"]
        cmd += [sys.executable, "-m", "harness", "sanitize", "--inner", "--target", spec, "--cases", str(count)]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        dt = time.perf_counter() - t0
        tail = (p.stdout + p.stderr).strip().splitlines()
        summary = summary_line(tail)
        ok = p.returncode == 0
        results.append((tool, ok, summary, dt))
        print(f"{tool:10} {'clean' if ok else 'ERRORS'}  {summary.strip()}  ({dt:.0f} s)", flush=True)
        if not ok:
            print("\n".join(tail[-40:]), flush=True)
    bad = [r for r in results if not r[1]]
    print(f"rmsnorm sanitize: {len(results) - len(bad)} of {len(results)} tools clean on {count} cases of {spec}")
    return 1 if bad else 0
