"""The compute-sanitizer lane: memcheck, racecheck, initcheck and synccheck over a sampled set
of cases, with PyTorch's caching allocator off and -lineinfo builds.

  python -m harness sanitize [--target T] [--tools memcheck,racecheck] [--cases K | --paths I,J]

runs ``compute-sanitizer --tool TOOL python -m harness sanitize --inner ...`` for each tool, the
tools side by side; the inner run loads the target in-process (no worker, so the sanitizer sees
every kernel) and runs the forward and backward laws on one case for each launch path (PATHS;
--cases K: the first K; --paths I,J: those of PATHS, by index).
"""

from __future__ import annotations

import os
import re
import random
import shutil
import subprocess
import sys
import time

from harness.judging.cases import DTYPES, Case, layout_possible
from harness.judging import laws
from harness.judging.target import Crashed, LawFailure, Rejected, run_while_short_of_memory
from harness.running.loading import load
from harness.running.spec import TargetSpec

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")

# One case for every launch path of kernels/rmsnorm_launch.cu and rmsnorm_plan.h (its default thresholds), rather
# than a random sample: (dtype, weight dtype, rows, N in 16-byte vectors or, for float64 and lengths that are not
# whole vectors, elements with "e", layout). Forward: register rows of 1 to 512 threads (short rows at 2 vectors a
# thread in 64 and 128), the staged path in clusters of 2, 4, 8 and 16 (and of 16 of the long rows' CTAs, twice the
# slab), the split path; backward: register rows, clusters of 2 to 16, the staged path in one CTA and clusters of
# 2, 4 and 16 (2-byte elements, the weight and grad_weight's sums in registers; 4-byte ones, the sums alone, in a
# cluster of 16, and at twice the vectors a thread, a row in registers), the split path; the fallback both ways;
# misaligned and padded rows copied to aligned workspace; zero rows. Indices are kept (the mutants' sanitize_paths
# name them): new cases go at the end.
PATHS = (
    ("float32", "float32", 3, "7e", "contiguous"),  # not whole vectors: the fallback, forward and backward
    ("float64", "float32", 2, "1000e", "transposed"),  # float64: the fallback; a transposed x copied
    ("bfloat16", "bfloat16", 17, 1, "contiguous"),  # a row a thread, many rows a CTA
    ("float16", "float32", 64, 64, "row_step"),  # a warp a row, 2 vectors a thread; many rows a unit
    ("float32", "float32", 3, 1024, "padded"),  # 256 threads a row; padded (staged where not 16-byte rows)
    ("bfloat16", "float32", 3, 257, "offset"),  # a misaligned base pointer staged; 128-thread rows
    ("float32", "float32", 2, 4096, "contiguous"),  # staged, a cluster of 2; backward: a cluster of 4
    ("bfloat16", "bfloat16", 2, 8192, "contiguous"),  # staged, a cluster of 4, forward and backward
    ("float32", "float32", 2, 16384, "contiguous"),  # staged, a cluster of 8; backward: 512 threads, a cluster of 16
    ("bfloat16", "bfloat16", 1, 32768, "contiguous"),  # staged, a cluster of 16, forward and backward
    ("bfloat16", "bfloat16", 0, 4096, "contiguous"),  # zero rows on a fast path: nothing launched
    ("float64", "float64", 0, "33e", "contiguous"),  # zero rows on the fallback: grad_weight still zeroed
    # Backward: 264 persistent units of 8 rows of two warps each, so some units take a second pass
    # (their reduction slots double-buffered by parity).
    ("float32", "float32", 2200, 128, "contiguous"),
    ("float32", "float32", 2, 8192, "contiguous"),  # backward: 512-thread CTAs in a cluster of 8
    # Forward: staged, 512-thread CTAs in a cluster of 16 (rows past 32,768 vectors); backward: staged at
    # 8 vectors a thread in a cluster of 16, the row taken into registers (split until the register row).
    ("float32", "float32", 1, 65536, "contiguous"),
    # Split, both directions (rows past 65,536 vectors forward): the backward in two units of 32 and 8
    # rows; the last slice and strip have one vector and one column (65537 vectors). (float32 at 16385
    # vectors, whose forward is a staged cluster of 16, crashed synccheck alone with an illegal address
    # in 40 rows, in an earlier kernel. This case, 32769 vectors until the forward split past 65,536,
    # would now be such a forward.)
    ("bfloat16", "float32", 40, 65537, "contiguous"),
    # Backward: a staged cluster of 2 whose second CTA holds one vector (a register cluster of 4 from
    # the register thresholds to the bulk-copy backward's); 140 rows. Forward: staged, a cluster of 2 as uneven.
    ("bfloat16", "float32", 140, 2049, "contiguous"),
    # Backward: staged 2-byte elements (grad_weight's sums and the weight in registers), a cluster of 4
    # whose third CTA holds one vector and whose fourth none; 30 units of 2 or 3 rows, so the stages take
    # turns. Forward: staged, a cluster of 4 as uneven.
    ("bfloat16", "float32", 70, 4097, "contiguous"),
    # Backward: staged in one CTA (bfloat16 N = 16,384; a register cluster of 2 from the register thresholds
    # to the bulk-copy backward's), 3 rows.
    ("bfloat16", "bfloat16", 3, 2048, "contiguous"),
    # Backward: staged 4-byte elements (grad_weight's sums in registers, in shared memory until the register
    # row; the weight loaded with each row), a cluster of 16 (float32 N = 131,072). Forward: staged, a
    # cluster of 16. One row: with two, the laws' own float64 reductions (torch's reduce_kernel, two outputs
    # split over CTAs) drew 23 racecheck errors on the H200, none of them in this project's kernels.
    ("float32", "float32", 1, 32768, "contiguous"),
    # Backward: a register cluster of 2 (float32 N = 8,192), 3 rows. Forward: 512 threads a row.
    ("float32", "float32", 3, 2048, "contiguous"),
    # Forward: the short rows' 2 vectors a thread in 128-thread rows (129 to 256 vectors: bfloat16 N = 2,048), 5 rows.
    ("bfloat16", "float32", 5, 256, "contiguous"),
)


def sample(count: int | None = None, seed: int = 0, paths: tuple[int, ...] = ()) -> list[Case]:
    """The path cases (all of them when count is None; only those indexed by paths where it names
    some), eps and seeds varied but fixed: a case is the same whichever others are chosen."""
    rng = random.Random(seed)
    out = []
    for i, (dtype, wdtype, rows, n_vec, layout) in enumerate(PATHS):
        eps, seed_i = rng.choice((1e-6, 1e-5, 0.1)), rng.randrange(2**31)
        if (count is not None and i >= count) or (paths and i not in paths):
            continue
        vec = 16 // DTYPES[dtype].itemsize
        n = int(n_vec[:-1]) if isinstance(n_vec, str) else n_vec * vec
        shape = (rows, n)
        if not layout_possible(layout, shape):
            raise ValueError(f"sanitize sample: layout {layout} is not possible for shape {shape}")
        out.append(Case(shape=shape, dtype=dtype, weight_dtype=wdtype, eps=eps,
                        layout=layout, grad_layout="contiguous", pattern="normal", seed=seed_i))
    return out


def parse_paths(text: str | None) -> tuple[int, ...]:
    """--paths "6,7": indices into PATHS (clear errors for anything else)."""
    if not text:
        return ()
    try:
        idx = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise ValueError(f"--paths takes indices of the path cases, comma-separated (0 to {len(PATHS) - 1}); "
                         f"got {text!r}") from None
    bad = [i for i in idx if not 0 <= i < len(PATHS)]
    if bad:
        raise ValueError(f"--paths: no path case {bad[0]}; there are {len(PATHS)} (0 to {len(PATHS) - 1})")
    return idx


# How long a path case waits, in all, for GPU memory that other processes hold. The kernel lane runs the
# tools beside mutate, whose judges take a case past 2^31 elements (up to about 40 GiB) in turns; with
# PyTorch's caching allocator off every tensor is a cudaMalloc, and on an 80 GB card one of them met the
# memory taken (initcheck died in the laws' float64 reference). Such a case is run again once the memory
# is back; the sanitizer's findings stand, since an allocation that failed ran no kernel.
OOM_WAIT_S = 180.0
OOM_STEP_S = 5.0


def run_waiting(run, what: str, wait_s: float = OOM_WAIT_S, step_s: float = OOM_STEP_S, sleep=time.sleep) -> int:
    """run(), again after step_s while it runs out of GPU memory (even for an allocation larger than the card,
    which the gate, not this run, judges), until wait_s have passed; then that error is raised. Returns how
    many times it waited."""
    def say(e, waited):
        print(f"sanitize sample: {what}: out of GPU memory ({str(e).strip().splitlines()[0][:160]}); "
              f"run again in {step_s:.0f} s ({waited:.0f} s waited)", flush=True)

    return run_while_short_of_memory(run, total=1 << 62, wait_s=wait_s, step_s=step_s, sleep=sleep,
                                     before_wait=say)[1]


def inner(spec: TargetSpec, count: int | None, paths: tuple[int, ...] = ()) -> int:
    t = load(spec, "cuda", strict=False)
    bad = 0
    waits = 0
    cases = sample(count, paths=paths)
    for case in cases:
        for law in ("forward_matches_reference", "backward_matches_reference"):
            if law.startswith("backward") and not t.has_backward:
                continue
            try:
                waits += run_waiting(lambda: laws.run_law(t, law, case), f"{law} on {case.short()}")
            except Rejected:
                pass
            except (LawFailure, Crashed) as e:
                bad += 1
                print(f"sanitize sample: {law} failed: {str(e).splitlines()[0]}", flush=True)
    waited = f"; {waits} {_RAN_AGAIN} beside other processes" if waits else ""
    print(f"sanitize sample: {len(cases)} path cases run, {bad} law failure(s) (the gate judges those){waited}",
          flush=True)
    return 0


def summary_line(lines: list[str]) -> str:
    """compute-sanitizer's count ("ERROR SUMMARY: 22 errors", "RACECHECK SUMMARY: 20 hazards
    displayed ..."), not the note that may follow it ("ERROR SUMMARY: 2 errors were not printed")."""
    return next((l for l in reversed(lines) if "SUMMARY:" in l and "not printed" not in l), lines[-1] if lines else "")


def main(spec: TargetSpec, tools: list[str], count: int | None, paths: tuple[int, ...] = ()) -> int:
    """Every tool on the path cases, the tools side by side (each is one process on the one GPU)."""
    exe = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not os.path.exists(exe):
        print("rmsnorm sanitize: compute-sanitizer not found; it comes with the CUDA toolkit", file=sys.stderr)
        return 2
    for tool in tools:
        if tool not in TOOLS:
            raise ValueError(f"unknown sanitizer tool {tool!r}; expected some of {TOOLS}")
    cases = len(sample(count, paths=paths))
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1", RMSNORM_LINEINFO="1")
    # Build first (outside the sanitizer, which would slow the compiler's own CUDA use).
    subprocess.run([sys.executable, "-m", "harness", "build", "--target", str(spec), "--device", "cuda"], env=env,
                   check=True)
    running = []
    for tool in tools:
        cmd = [exe, "--tool", tool, "--error-exitcode", "99", "--print-limit", "20"]
        if tool == "memcheck":
            cmd += ["--leak-check", "no"]
        cmd += [sys.executable, "-m", "harness", "sanitize", "--inner", "--target", str(spec)]
        cmd += ["--paths", ",".join(map(str, paths))] if paths else ["--cases", str(cases)]
        running.append((tool, time.perf_counter(), subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                                                     stderr=subprocess.STDOUT, text=True)))
    results = []
    for tool, t0, proc in running:
        out, _ = proc.communicate()
        dt = time.perf_counter() - t0
        tail = out.strip().splitlines()
        summary = summary_line(tail)
        verdict = tool_verdict(proc.returncode, tail)
        refused = refused_allocations(tail)
        if refused:
            summary += (f" (each an allocation refused for want of GPU memory beside other processes; "
                        f"{refused} case(s) run again)")
        results.append((tool, verdict, summary, dt))
        print(f"{tool:10} {verdict}  {summary.strip()}  ({dt:.0f} s)", flush=True)
        if verdict != "clean":
            print("\n".join(tail[-40:]), flush=True)
    bad = [r for r in results if r[1] != "clean"]
    unfinished = "".join(f"; {r[0]} {r[1]}" for r in bad if r[1] != "ERRORS")
    which = f" ({','.join(map(str, paths))})" if paths else ""
    print(f"rmsnorm sanitize: {len(results) - len(bad)} of {len(results)} tools clean on {cases} path cases{which} of {spec} "
          f"(side by side, {max(r[3] for r in results):.0f} s){unfinished}")
    return 1 if bad else 0


# compute-sanitizer reports a CUDA call that failed ("Program hit cudaErrorMemoryAllocation (error 2) due to
# "out of memory" on CUDA API call to cudaMalloc") as an error of the program. Where the run's own cases
# ran out of memory beside other processes and were run again, those calls are the machine's state.
_ALLOCATION_REFUSED = re.compile(r"Program hit (cudaErrorMemoryAllocation|cudaErrorDevicesUnavailable)\b")
_ERRORS = re.compile(r"ERROR SUMMARY: (\d+) errors?")
_RAN_AGAIN = "run(s) again after running out of GPU memory"


def refused_allocations(tail: list[str]) -> int:
    """How many of the errors a tool reported are allocations refused for want of memory, where those are all
    of them and the run says it ran their cases again; 0 otherwise."""
    counted = next((int(m.group(1)) for l in reversed(tail) if (m := _ERRORS.search(l))), 0)
    refused = sum(1 for l in tail if _ALLOCATION_REFUSED.search(l))
    ran_again = any(_RAN_AGAIN in l for l in tail)
    return refused if counted and refused == counted and ran_again else 0


def tool_verdict(returncode: int, tail: list[str]) -> str:
    """'clean'; 'ERRORS' where the tool reported some (its --error-exitcode, 99); otherwise the run did not
    finish, and the last exception line its output holds says why (a synccheck run once died of an
    out-of-memory error in the harness's own tensors, beside a mutate step, and was shown as ERRORS with
    its summary reading 0 errors). Either way the tool is not clean."""
    if returncode == 0:
        return "clean"
    if returncode == 99:
        return "clean" if refused_allocations(tail) else "ERRORS"
    why = next((l.strip() for l in reversed(tail) if re.match(r"^[\w.]+(Error|Exception)\b.*:", l.strip())), "")
    return f"DID NOT FINISH (exit {returncode}{': ' + why[:200] if why else ''})"


