"""Benchmark of the worker's restart: how long it takes to replace a worker (after a crash) and
run one case, for each start method, on this machine's lane. A script, not a test; its output is
committed under benchmarks/results/. Crash shrinking pays this once per step.

  python benchmarks/worker_restart.py [--restarts 8] [--device cpu|cuda]

No spare workers are kept loading (RMSNORM_SPARE_WORKERS=0), so each restart is timed alone.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--restarts", type=int, default=8)
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None)
    args = ap.parse_args()
    if args.restarts < 1:
        ap.error(f"--restarts: expected at least 1, but got {args.restarts}")
    os.environ["RMSNORM_SPARE_WORKERS"] = "0"  # read when harness.running.worker is imported, below
    import torch

    from harness.running import provenance as cli
    from harness.running import worker
    from harness.judging.cases import Case
    from harness.running.loading import default_device

    device = args.device or default_device()
    gpu = torch.cuda.get_device_name() if device == "cuda" else f"{os.cpu_count()} CPU cores"
    print(f"# worker restart, lane {worker.lane_of(device)} ({gpu}), torch {torch.__version__}, "
          f"commit {cli.commit(ignore=('benchmarks/results/*',))}, python {platform.python_version()}")
    print(f"{'start method':14} {'first start s':>14} {'restarts':>9} {'median s':>9} {'min s':>7} {'max s':>7}")
    case = Case(shape=(4, 64))
    for method in worker.START_METHODS:
        os.environ["RMSNORM_WORKER_START"] = method
        r = worker.Runner("project", device)
        t0 = time.perf_counter()
        r.start()
        v = r.check("forward_matches_reference", case)
        first = time.perf_counter() - t0
        if v.status != "pass":
            print(f"{method}: the warm-up case did not pass: {v.status}: {v.message.splitlines()[0]}")
            r.stop()
            return 1
        times = []
        for _ in range(args.restarts):
            t0 = time.perf_counter()
            r._restart()  # what a crash costs: a new worker that loads the target
            r.check("forward_matches_reference", case)
            times.append(time.perf_counter() - t0)
        r.stop()
        print(f"{method:14} {first:14.2f} {len(times):9d} {statistics.median(times):9.2f} {min(times):7.2f} "
              f"{max(times):7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
