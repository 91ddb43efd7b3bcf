"""Run the suite or the command line in a subprocess, as a user would."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(args, *, env=None, timeout=900):
    e = dict(os.environ)
    for k in ("RMSNORM_TARGET", "RMSNORM_STRICT", "RMSNORM_CORPUS", "RMSNORM_TALLY_DIR", "PYTEST_XDIST_WORKER",
              "RMSNORM_CONTRACT", "RMSNORM_CONTRACT_FROM", "RMSNORM_BUILT", "RMSNORM_BUDGET_END"):
        e.pop(k, None)
    e.update(env or {})
    p = subprocess.run([sys.executable, *args], cwd=ROOT, env=e, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def pytest_run(*args, env=None, timeout=900):
    return run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning", *args],
               env=env, timeout=timeout)
