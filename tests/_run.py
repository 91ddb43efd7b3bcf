"""Run the suite or the command line in a subprocess, as a user would."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


_CORPUS: list[str] = []


def _session_corpus() -> str:
    if not _CORPUS:
        import tempfile

        _CORPUS.append(tempfile.mkdtemp(prefix="rmsnorm-test-corpus-"))
    return _CORPUS[0]


def sharing_env() -> dict:
    """Side by side under pytest-xdist, the gate a test starts shares the cores with the other
    workers' (harness.running.session.cpu_threads), as the test's own process does: with a thread per core
    each, two gates on the 2-core CI machine took several times as long as one."""
    from harness.running.worker import SHARERS_ENV

    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    return {SHARERS_ENV: workers} if workers.isdigit() and int(workers) > 1 else {}


def run(args, *, env=None, timeout=900, cwd=ROOT):
    e = dict(os.environ)
    for k in ("RMSNORM_TARGET", "RMSNORM_STRICT", "RMSNORM_CORPUS", "RMSNORM_TALLY_DIR", "PYTEST_XDIST_WORKER",
              "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID", "RMSNORM_CONTRACT", "RMSNORM_CONTRACT_FROM", "RMSNORM_BUILT", "RMSNORM_BUDGET_END"):
        e.pop(k, None)
    # Saved cases go to a folder of this test session, never the clone's corpus/ (a gate without
    # --corpus once left corpus/module-tests.targets.batch_variant/ there); --corpus still wins.
    e["RMSNORM_CORPUS"] = _session_corpus()
    e.update(sharing_env())
    e.update(env or {})
    p = subprocess.run([sys.executable, *args], cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def pytest_run(*args, env=None, timeout=900):
    return run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning", *args],
               env=env, timeout=timeout)
