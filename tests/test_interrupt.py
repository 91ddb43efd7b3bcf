"""Ctrl-C ends a run within a few seconds, whatever it is doing: exit 130, "interrupted", the report
of what ran, and nothing recorded that was not found (a worker that died of the interrupt used to
be saved as a crash of the target, and some runs ignored the interrupt and ran to their end).
Twenty runs, each interrupted as a terminal's Ctrl-C would (SIGINT to the whole process group),
during every law of the suite and in the gate."""

import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests._run import ROOT

# Beside other tests: each signal is sent a set time after the run's own log names the law it is to
# land in (or the extension ready), so load delays the mark and the signal alike; a run given 10 s
# to end takes a few. (Held alone, these 20 runs kept the other test worker waiting 85-100 s.)

# Each fuzz run is held to one test of the suite (the laws that run on the CPU lane), so the
# interrupt lands inside it; the delays vary where in the law it lands.
TESTS = ("forward_matches_reference", "backward_matches_reference", "gradcheck", "autograd_grad_out",
         "scale_invariance", "rows_independent", "strided_equals_contiguous", "deterministic", "batch_invariant",
         "inputs_unchanged", "every_output_written", "nonfinite_propagates", "bad_inputs_raise_cleanly", "opcheck",
         "compile_equals_eager", "forward_matches_reference_large", "backward_matches_reference_tall", "outputs_kept")
SETTLE_S = 10.0  # how long a run may take to end once interrupted


def _start(args, tmp_path, name):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RMSNORM_", "PYTEST_XDIST"))}
    env["RMSNORM_CORPUS"] = str(tmp_path / name / "corpus")
    env["RMSNORM_PROGRESS_S"] = "1"  # a progress line a second: the test sees which law is running
    env["RMSNORM_TRACEBACK"] = "1"  # a fault of the harness shows where it is
    log = open(tmp_path / f"{name}.log", "w")
    p = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=ROOT, env=env, stdout=log,
                         stderr=subprocess.STDOUT, start_new_session=True)
    return p, log, time.monotonic()


def _interrupt(p, log, started, tmp_path, name, after_s, marker):
    """SIGINT to the run's process group after_s seconds after its log first matched marker (fuzz:
    the progress line naming its law; the gate: the extension's "ready" line), or after it started
    where there is no marker. Both runs of a pair are watched at once, each from its own start: the
    second's delay once began only after the first had ended, and a fast gate finished first."""
    path = tmp_path / f"{name}.log"
    deadline = time.monotonic() + 300
    since = started
    if marker:
        seen = re.compile(marker, re.M)
        while not seen.search(path.read_text()) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.1)
        since = time.monotonic()
    time.sleep(max(0.0, since + after_s - time.monotonic()))
    assert p.poll() is None, f"{name} ended before it was interrupted:\n{path.read_text()[-2000:]}"
    t0 = time.monotonic()
    os.killpg(p.pid, signal.SIGINT)
    try:
        code = p.wait(timeout=SETTLE_S + 20)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        log.close()
    return code, time.monotonic() - t0, (tmp_path / f"{name}.log").read_text()


# Every other law (the interrupt is checked between cases, the same code for each law), at staggered times.
RUNS = ([("fuzz", TESTS[2 * i % len(TESTS)], 0.3 * (i * 7 % 5)) for i in range(8)]
        + [("gate", "", 5.0), ("gate", "ready", 8.0)])
# A gate's laws take about 20 s on the 2-core CI machine once its extension is ready. A gate whose
# extension was built before says so after 1.5 s (no build process since it is known) and loads it
# in a worker for a few more; 5 s from its start is usually in that: one gate is interrupted while
# it loads, one among its laws.


@pytest.mark.parametrize("pair", range(0, len(RUNS), 2), ids=lambda i: "-".join(
    f"{kind}{':' + law if law else ''}@{after:g}s" for kind, law, after in RUNS[i:i + 2]))
def test_an_interrupt_ends_the_run_with_its_report_and_records_nothing_false(pair, tmp_path):
    started = []
    for k, (kind, law, after) in enumerate(RUNS[pair:pair + 2]):  # two at a time: the CI machine has 2 cores
        name = f"{kind}-{law or 'all'}-{k}"
        args = (["fuzz", "--minutes", "5", "--device", "cpu", "--workers", "1", "--laws", law] if kind == "fuzz"
                else ["gate", "--device", "cpu", "-n", "0"])
        marker = rf"now: {law}$" if kind == "fuzz" else (r"^rmsnorm: .* ready " if law else "")
        started.append((name, kind, after, marker, *_start(args, tmp_path, name)))
    with ThreadPoolExecutor(len(started)) as pool:
        ended = list(pool.map(lambda r: _interrupt(*r[4:7], tmp_path, r[0], r[2], r[3]), started))
    for (name, kind, after, *_), (code, settle, out) in zip(started, ended):
        where = f"{name}, interrupted after {after:g} s:\n{out[-3000:]}"
        assert code == 130, where
        assert settle < SETTLE_S, f"{settle:.1f} s to end; {where}"
        assert "interrupted" in out.lower(), where
        assert ("fuzz report:" in out) if kind == "fuzz" else ("rmsnorm gate INTERRUPTED" in out), where
        assert "the worker process died" not in out and "Traceback" not in out, where
        saved = list((tmp_path / name / "corpus").rglob("*.json"))
        assert not saved, f"cases saved for a correct target: {saved}; {where}"


def test_a_build_that_ctrl_c_ended_is_an_interrupt_not_a_set_up_error(monkeypatch):
    """Ctrl-C reaches the gate's build subprocess too: the build it ended once made the gate say
    "target project does not build" (exit 2) where it had been interrupted (exit 130)."""
    from harness.commands import gate as cli
    from harness.running import interrupts

    monkeypatch.setattr(interrupts, "_RECEIVED", {"signal": None})
    monkeypatch.setattr(cli, "work_root", lambda: ROOT / ".build")
    # The build's process runs whether or not another test built the project first: a build that
    # finished here before is not built again, and this test once passed or failed by test order.
    monkeypatch.setattr(cli, "_built_before", lambda spec: None)
    builds = []

    def build_ended_by_ctrl_c(cmd, **kw):
        builds.append(cmd)
        interrupts._on_signal(signal.SIGINT, None)  # the signal the gate's handler took meanwhile
        return subprocess.CompletedProcess(cmd, -signal.SIGINT, "rmsnorm: building ...\n", "KeyboardInterrupt\n")

    monkeypatch.setattr(cli.subprocess, "run", build_ended_by_ctrl_c)
    try:
        with pytest.raises(KeyboardInterrupt):
            cli.preflight("the gate")
        assert len(builds) == 1 and "build" in builds[0], builds
        assert interrupts.exit_code() == 130
    finally:
        interrupts.acknowledge()
