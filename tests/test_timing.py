"""The tests whose assertions are about time with little room, each held alone (marked
`exclusive`, tests/conftest.py): a gate's wall within 5 s of its budget, how fast a worker restarts.
In a file of their own, run last under pytest-xdist (conftest.py's LAST), so that the
other worker is left only short files to finish before they may start: where they sat in long
files, they waited 80 s and 22 s for it in one run of the test line."""

import pytest

from harness.judging.cases import Case
from harness.running.worker import Runner
from tests._run import run


@pytest.mark.exclusive("a budget bound")
def test_the_budget_bounds_a_run_whose_failure_is_still_shrinking(tmp_path):
    """A failing law's shrinking was never cut: a gate with --budget 200 still ran at 261 s."""
    import re
    import time

    t0 = time.monotonic()
    code, out = run(["-m", "harness", "gate", "--device", "cpu", "-n", "0", "--budget", "6", "--target",
                     "module:tests.targets.slow_wrong", "--corpus", str(tmp_path), "--", "-k",
                     "test_forward_matches_reference and not large and not tall"], timeout=900)
    took = time.monotonic() - t0
    assert code == 1 and "rmsnorm gate FAILED" in out, out[-3000:]
    assert "shrinking cut short by the wall-time budget: forward_matches_reference" in out, out[-3000:]
    wall = int(re.search(r"profile gate, (\d+) s wall", out).group(1))
    assert wall <= 6 + 5, out[-3000:]  # the budget, one case's time, and the report
    saved = list(tmp_path.rglob("*.json"))
    assert len(saved) == 1 and "shrunk" in saved[0].read_text(), (saved, out[-3000:])
    assert took < 60, took


@pytest.mark.exclusive("how fast a worker restarts")
def test_workers_restart_fast_and_see_the_parents_environment(monkeypatch):
    """A forkserver worker (the default) restarts without importing torch again, and sees the
    environment of the process that asked for it, not the server's."""
    import time

    from harness.running.worker import start_method

    assert start_method() in ("forkserver", "spawn")
    monkeypatch.setenv("RMSNORM_WORKER_START", "fork")
    try:
        start_method()
        raise AssertionError("an unknown start method was accepted")
    except ValueError as e:
        assert "expected one of ('forkserver', 'spawn'), but got 'fork'" in str(e)
    monkeypatch.delenv("RMSNORM_WORKER_START")
    monkeypatch.setenv("RMSNORM_REJECT_WITH", "first")
    r = Runner("module:tests.targets.reject_all", "cpu", strict=False, env={"RMSNORM_REJECT_NOTE": "from the runner"})
    r.start()
    try:
        monkeypatch.setenv("RMSNORM_REJECT_WITH", "second")  # set after the forkserver started
        t0 = time.perf_counter()
        r._restart()
        restart_s = time.perf_counter() - t0
        v = r.check("forward_matches_reference", Case(shape=(2, 4)))
        assert v.status == "rejected" and "second; from the runner" in v.message, v
        if start_method() == "forkserver":
            assert restart_s < 2.0, f"a forked worker took {restart_s:.1f} s to start"
    finally:
        r.stop()
