"""How fast Triton's interpreter (TRITON_INTERPRET=1) runs rmsnorm_triton.py on CPU tensors:
seconds a forward and a backward call, for rows x N in {1, 16, 256, 4096} x {8, 64, 512, 4096,
16384, 65536} in float32 and bfloat16, and what the first calls of a fresh process cost.

    python3 examples/triton_rmsnorm/interpreter_speed.py [--out FILE]   # from the repository root

It sets TRITON_INTERPRET=1 itself. A shape whose call is predicted to take over LIMIT_S (the time
at the previous row count, scaled by the rows) is skipped and its prediction shown instead. Each
call is timed REPEATS times, or once where one call takes over a second; the table shows the
median. torch runs on one thread: the interpreter's work is numpy's, on one core, and the
machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch
import triton

from examples.triton_rmsnorm import rmsnorm_triton

ROWS = (1, 16, 256, 4096)
NS = (8, 64, 512, 4096, 16384, 65536)
DTYPES = (torch.float32, torch.bfloat16)
LIMIT_S = 20.0
REPEATS = 3


def _timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def _median_time(fn, *args) -> float:
    times = [_timed(fn, *args)]
    while len(times) < REPEATS and times[0] < 1.0:
        times.append(_timed(fn, *args))
    return statistics.median(times)


FIRST_CALLS = """
import sys, time
sys.path.insert(0, sys.argv[1])
t = time.perf_counter(); import torch; out = {"import torch": time.perf_counter() - t}
t = time.perf_counter(); from examples.triton_rmsnorm import rmsnorm_triton as m
out["import triton and the module"] = time.perf_counter() - t
x, w, g = torch.randn(1, 8), torch.randn(8), torch.randn(1, 8)
for call, args in (("forward", (x, w, 1e-6)), ("backward", (g, x, w, torch.ones(1)))):
    for i in ("1st", "2nd", "3rd"):
        t = time.perf_counter(); getattr(m, call)(*args); out[f"{call} {i}"] = time.perf_counter() - t
print(repr(out))
"""


def _first_calls_in_fresh_process() -> dict[str, float]:
    """Importing, then three forward and three backward calls on 1 x 8 float32, in a new process."""
    res = subprocess.run([sys.executable, "-c", FIRST_CALLS, str(ROOT)], capture_output=True, text=True, check=True,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    return eval(res.stdout.strip().splitlines()[-1])  # the dict of floats FIRST_CALLS printed


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _fmt(seconds: float | None, predicted: float | None) -> str:
    if seconds is not None:
        return f"{seconds:.3f}" if seconds < 10 else f"{seconds:.1f}"
    return f"(~{predicted:.0f})"


def measure(log) -> list[str]:
    torch.set_num_threads(1)
    lines = []
    for dtype in DTYPES:
        name = str(dtype).replace("torch.", "")
        table: dict[tuple[int, int], tuple[str, str]] = {}
        for n in NS:
            last: dict[str, tuple[int, float]] = {}
            for rows in ROWS:
                cells = []
                x = None
                for call in ("forward", "backward"):
                    if call in last:
                        prev_rows, prev_s = last[call]
                        predicted = prev_s * rows / prev_rows
                        if predicted > LIMIT_S:
                            cells.append(_fmt(None, predicted))
                            last[call] = (rows, predicted)
                            continue
                    if x is None:
                        gen = torch.Generator().manual_seed(0)
                        x = torch.randn(rows, n, generator=gen).to(dtype)
                        w = torch.randn(n, generator=gen).to(dtype)
                        g = torch.randn(rows, n, generator=gen).to(dtype)
                        inv = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
                    if call == "forward":
                        s = _median_time(rmsnorm_triton.forward, x, w, 1e-6)
                    else:
                        s = _median_time(rmsnorm_triton.backward, g, x, w, inv)
                    last[call] = (rows, s)
                    cells.append(_fmt(s, None))
                table[(rows, n)] = (cells[0], cells[1])
                log(f"{name} rows={rows} N={n}: forward {cells[0]} s, backward {cells[1]} s")
        lines.append(f"{name}: seconds a call, forward / backward (in parentheses: predicted, not run)")
        lines.append("rows \\ N " + "".join(f"{n:>20}" for n in NS))
        for rows in ROWS:
            lines.append(f"{rows:>8} " + "".join(f"{table[(rows, n)][0] + ' / ' + table[(rows, n)][1]:>20}"
                                                 for n in NS))
        lines.append("")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the report here as well as to stdout")
    args = ap.parse_args()
    head = [
        "Triton interpreter (TRITON_INTERPRET=1) speed of examples/triton_rmsnorm/rmsnorm_triton.py on CPU tensors",
        (f"made by: python3 examples/triton_rmsnorm/interpreter_speed.py (LIMIT_S {LIMIT_S:.0f}, median of up "
         f"to {REPEATS} calls, torch on 1 thread)"),
        (f"machine: nproc {os.cpu_count()}, CPU {_cpu_model()}, Python {platform.python_version()}, "
         f"torch {torch.__version__}, triton {triton.__version__}"),
        "",
    ]
    first = _first_calls_in_fresh_process()
    head.append("first calls in a fresh process (1 x 8 float32), seconds: " +
                ", ".join(f"{k} {v:.3f}" for k, v in first.items()))
    head.append("")
    start = time.perf_counter()
    body = measure(lambda s: print(s, file=sys.stderr, flush=True))
    body.append(f"measured in {time.perf_counter() - start:.0f} s")
    text = "\n".join(head + body) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
