"""Benchmark of the suite itself: cases per second for each law through the worker, and the
gate's wall time, on this machine's lane. A script, not a test; its output is committed under benchmarks/results/.

  python benchmarks/cases_per_second.py [--cases 30] [--device cpu|cuda] [--no-gate] [--gate-log FILE]

Cases come from each law's own strategy (derandomized, so every run times the same cases).
The first call of each law is left out of the timing (warm-up).
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


# Laws whose every case is big (about 4 GiB tensors): timed on a few cases.
EXPENSIVE = {"beyond_2_31_elements": 3}


def draw(law: str, count: int):
    from hypothesis import HealthCheck, Phase, given, settings

    from properties.strategies import strategy_for

    out = []

    @settings(max_examples=count, derandomize=True, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(case=strategy_for(law))
    def collect(case):
        out.append(case)

    collect()
    return out[:count]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=30)
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None)
    ap.add_argument("--no-gate", action="store_true", help="skip timing the whole gate")
    ap.add_argument("--gate-log", type=Path, help="write the gate's own output (its summary table) here")
    args = ap.parse_args()
    import torch

    from harness.running import provenance as cli
    from harness.judging.laws import LAWS
    from harness.running.loading import default_device
    from harness.running.worker import Runner, lane_of

    device = args.device or default_device()
    r = Runner("project", device)
    r.start()
    commit = cli.commit(ignore=("benchmarks/results/*",))  # its own output does not make the tree dirty
    gpu = torch.cuda.get_device_name() if device == "cuda" else f"{os.cpu_count()} CPU cores"
    print(f"# suite speed, lane {lane_of(device)} ({gpu}), torch {torch.__version__}, commit {commit}, "
          f"python {platform.python_version()}")
    print(f"{'law':28} {'cases':>6} {'cases/s':>9} {'median ms':>10} {'max ms':>8}")
    for law, lw in LAWS.items():
        if lw.needs_cuda and device != "cuda":
            print(f"{law:28} {'not run: needs CUDA':>35}")
            continue
        cases = draw(law, min(args.cases, EXPENSIVE.get(law, args.cases)) + 1)
        r.check(law, cases[0])  # warm-up
        times = []
        for case in cases[1:]:
            v = r.check(law, case)
            if v.status not in ("pass", "rejected"):
                print(f"{law}: {v.status}: {v.message.splitlines()[0]}")
            times.append(v.seconds)
        total = sum(times)
        print(f"{law:28} {len(times):6d} {len(times) / total:9.1f} {1e3 * statistics.median(times):10.2f} "
              f"{1e3 * max(times):8.1f}")
    r.stop()
    if not args.no_gate:
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "harness", "gate", "--device", device], cwd=ROOT,
                           capture_output=True, text=True)
        print(f"gate wall time: {time.perf_counter() - t0:.1f} s (exit code {p.returncode}, profile gate, "
              f"cached build)")
        verdict = [l for l in p.stdout.splitlines() if l.startswith("rmsnorm gate")]
        print(verdict[-1] if verdict else f"the gate printed no verdict; its last lines:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
        if args.gate_log:
            args.gate_log.write_text(p.stdout + p.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
