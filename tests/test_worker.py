"""The worker survives what targets do: crashes, hangs, rejections, wrong answers."""

import pytest

from harness.judging.cases import Case
from harness.running.spec import TargetSpec
from harness.running.worker import Runner
from tests._run import pytest_run, run


def test_a_crash_is_reported_and_the_run_goes_on():
    r = Runner("module:tests.targets.crash", "cpu", strict=False)
    r.start()
    try:
        v = r.check("forward_matches_reference", Case(shape=(3, 4)))
        assert v.status == "crash" and "signal 11" in v.message, v
        v = r.check("forward_matches_reference", Case(shape=(2, 4)))
        assert v.status == "pass", v
        assert r.restarts == 1
    finally:
        r.stop()


def test_a_hang_is_reported_and_the_run_goes_on():
    r = Runner("module:tests.targets.hang", "cpu", strict=False, timeout_s=5)
    r.start()
    try:
        v = r.check("forward_matches_reference", Case(shape=(1, 101)))
        assert v.status == "hang", v
        assert r.check("forward_matches_reference", Case(shape=(1, 100))).status == "pass"
    finally:
        r.stop()


def test_a_load_ended_inside_torchs_build_lock_does_not_block_the_next(tmp_path, monkeypatch):
    """torch before 2.13 (the GPU machine's 2.11) keeps a build folder's loads apart with a lock
    file that only its holder removes: a worker killed inside a load leaves it, and the next load of
    that folder waited for it forever. build() holds the folder's load lock (an OS lock) and removes
    such a file first; torch's newer lock file is left alone."""
    import fcntl
    import types

    from torch.utils import cpp_extension

    from rmsnorm import _build as build

    monkeypatch.setenv("RMSNORM_BUILD_ROOT", str(tmp_path / "builds"))
    src = tmp_path / "target.cpp"
    src.write_text("// a target's source\n")
    spec = build.sources_spec([src])
    d = build.build_dir_of(spec)
    d.mkdir(parents=True)
    seen = []

    def load(**kw):
        with open(d / build.LOAD_LOCK) as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = False
            except BlockingIOError:
                held = True
        seen.append((held, (d / "lock").exists()))
        return types.ModuleType(kw["name"])

    monkeypatch.setattr(cpp_extension, "load", load)
    said = []
    monkeypatch.setattr(cpp_extension, "FileBaton", object, raising=False)  # torch's old lock
    (d / "lock").write_text("")  # what a process ended inside torch's load leaves
    build.build(spec, log=said.append)
    assert seen == [(True, False)], seen
    assert any("left by a process that ended inside a load" in s for s in said), said
    monkeypatch.delattr(cpp_extension, "FileBaton")  # torch's OS lock on the same file
    (d / "lock").write_text("")
    build.build(spec, log=said.append)
    assert seen[1] == (True, True), seen


def test_a_target_that_rejects_everything_fails_the_run(tmp_path):
    code, out = pytest_run("properties/test_forward.py", "--rmsnorm-target", "module:tests.targets.reject_all",
                           "--rmsnorm-corpus", str(tmp_path))
    assert code != 0, out
    assert "crashed on a valid input: forward raised NotImplementedError" in out, out
    assert "the target has accepted no input so far" in out, out


def test_a_wrong_answer_is_shrunk_saved_and_replayed(tmp_path):
    code, out = pytest_run("properties/test_forward.py", "--rmsnorm-target", "module:tests.targets.wrong_tail",
                           "--rmsnorm-corpus", str(tmp_path), "--hypothesis-profile=ci")
    assert code == 1, out
    saved = sorted(tmp_path.glob("module-tests.targets.wrong_tail/forward_matches_reference-*.json"))
    assert len(saved) == 1, (saved, out)
    import json

    doc = json.loads(saved[0].read_text())
    assert doc["shrunk"] and doc["case"]["shape"][-1] % 8 == 7, doc
    assert doc["case"]["shape"][-1] == 7, f"not shrunk to the smallest N: {doc['case']}"
    code, out = run(["-m", "harness", "replay", str(saved[0])], env={"RMSNORM_CORPUS": str(tmp_path)})
    assert code == 1 and "REPRODUCED [fail]" in out and "y:" in out, out


def test_every_law_sorts_a_refusal_as_rejected():
    """A lenient target may refuse a dtype. Every law that runs on this lane must report that as
    rejected, never as a fault of the harness (a law that called the target directly once did)."""
    from harness.judging.laws import LAWS
    from harness.running.loading import default_device

    r = Runner("module:tests.targets.float32_only", default_device(), strict=False)
    r.start()
    try:
        case = Case(shape=(3, 8), dtype="bfloat16", weight_dtype="bfloat16")
        ran = []
        for law in LAWS:
            if law == "beyond_2_31_elements":
                continue  # its cases are 17 GiB; it calls the target as the reference laws do
            v = r.check(law, case)
            if v.status == "not_applicable":
                continue
            assert v.status in ("rejected", "pass"), (law, v)  # gradcheck runs in float32 or float64
            ran.append((law, v.status))
        assert {("forward_matches_reference", "rejected"), ("backward_matches_reference", "rejected")} <= set(ran), ran
        assert r.check("forward_matches_reference", Case(shape=(3, 8))).status == "pass"
    finally:
        r.stop()


_TURN = r"""
import sys, time, torch
import harness.judging.laws.cuda as c
torch.cuda.synchronize = lambda device=None: None  # no GPU here: only the turn is under test
torch.cuda.empty_cache = lambda: None
c._TURN_WAIT_S = float(sys.argv[2])
try:
    with c._gpu_memory_turn(torch.device("cuda", 7)):
        open(sys.argv[1] + ".in", "w").close()
        time.sleep(float(sys.argv[3]))
    print("turn")
except c.NoRoom as e:  # not run on this GPU now: neither a failure nor a harness error
    print("no room:", e)
"""


def test_big_cases_take_turns_on_a_gpu(tmp_path):
    """Two processes never hold a GPU's big-case turn at once; one that waits too long is told why."""
    import subprocess
    import sys
    import time

    from rmsnorm._buildenv import ROOT

    def start(name, wait_s, hold_s):
        return subprocess.Popen([sys.executable, "-c", _TURN, str(tmp_path / name), str(wait_s), str(hold_s)],
                                cwd=ROOT, stdout=subprocess.PIPE, text=True)

    holder = start("a", 30, 10)  # long enough for b to import torch and give up
    deadline = time.time() + 60
    while not (tmp_path / "a.in").exists():
        assert time.time() < deadline and holder.poll() is None, "the first process never took its turn"
        time.sleep(0.05)
    impatient = start("b", 0.5, 0)
    patient = start("c", 30, 0)
    assert impatient.communicate(timeout=60)[0].startswith("no room: another process held"), "b"
    assert not (tmp_path / "b.in").exists()
    assert patient.communicate(timeout=60)[0].strip() == "turn"
    assert holder.communicate(timeout=60)[0].strip() == "turn"
    # c got in only after a let go.
    assert (tmp_path / "c.in").stat().st_mtime >= (tmp_path / "a.in").stat().st_mtime + 9.5


def test_cuda_errors_restart_the_worker_only_when_the_context_is_broken():
    """An empty grid's launch error is not sticky: the crash is reported and the worker carries on.
    A misaligned vector load is sticky: the crash is reported and the worker is replaced. Either
    way the next case runs."""
    import pytest
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (CPU lane)")
    r = Runner("mutant:cuda_zero_rows_empty_grid", "cuda", strict=False)
    r.start()
    try:
        v = r.check("forward_matches_reference", Case(shape=(0, 1)))
        assert v.status == "crash" and "invalid" in v.message, v
        assert (r.restarts, r.kept_after_crash) == (0, 1)
        assert r.check("forward_matches_reference", Case(shape=(2, 8))).status == "pass"
    finally:
        r.stop()
    r = Runner("mutant:cuda_misaligned_pointer", "cuda", strict=False)
    r.start()
    try:
        v = r.check("forward_matches_reference", Case(shape=(10, 8), layout="offset"))
        assert v.status == "crash" and "misaligned address" in v.message, v
        assert (r.restarts, r.kept_after_crash) == (1, 0)
        assert r.check("forward_matches_reference", Case(shape=(2, 8))).status == "pass"
    finally:
        r.stop()


def test_slow_targets_get_a_longer_case_limit(monkeypatch):
    from harness.running import worker

    monkeypatch.delenv("RMSNORM_CASE_TIMEOUT", raising=False)
    compiled = TargetSpec("peer", "compiled")
    assert worker.case_timeout_for(compiled) == worker.SLOW_TARGETS_S[compiled] > worker.DEFAULT_TIMEOUT_S
    assert worker.case_timeout_for("project") == worker.DEFAULT_TIMEOUT_S
    assert Runner("peer:compiled", "cpu").timeout_s == worker.SLOW_TARGETS_S[TargetSpec("peer", "compiled")]
    assert Runner("peer:compiled", "cpu", timeout_s=7).timeout_s == 7
    monkeypatch.setenv("RMSNORM_CASE_TIMEOUT", "30")  # the environment wins (DEFAULT_TIMEOUT_S is read at import)
    assert worker.case_timeout_for("peer:compiled") == worker.DEFAULT_TIMEOUT_S


def test_processes_side_by_side_share_the_cores(monkeypatch):
    """K workers of xdist or of a fuzz campaign each get cores // K torch threads (each starting a
    thread per core made `gate -n 2` twice as slow as no -n on 2 cores)."""
    import os

    from harness.running import worker as session  # where the cores' share is worked out

    for k in ("RMSNORM_CPU_THREADS", "PYTEST_XDIST_WORKER_COUNT", "RMSNORM_PROCESSES"):
        monkeypatch.delenv(k, raising=False)
    cores = os.cpu_count() or 1
    assert session.cpu_threads() is None  # one process: torch's own default
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    assert session.cpu_threads() == max(1, cores // 2)
    monkeypatch.setenv("RMSNORM_CPU_THREADS", "3")
    assert session.cpu_threads() == 3
    monkeypatch.setenv("RMSNORM_CPU_THREADS", "0")
    try:
        session.cpu_threads()
        raise AssertionError("RMSNORM_CPU_THREADS=0 was accepted")
    except ValueError as e:
        assert "expected a whole number >= 1, but got '0'" in str(e)
    monkeypatch.setenv("RMSNORM_CPU_THREADS", "1")
    monkeypatch.setenv("RMSNORM_EXPECT_THREADS", "1")
    r = Runner("module:tests.targets.thread_probe", "cpu", strict=False,
               env={"RMSNORM_CPU_THREADS": str(session.cpu_threads())})
    r.start()
    try:
        v = r.check("forward_matches_reference", Case(shape=(3, 4)))
        assert v.status == "pass", v
    finally:
        r.stop()


_SERVER_PROBE = '''
import os
import sys
import threading

from harness.running import worker


def server_cmdline(q):
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:  # a forked worker's parent: the fork server
        q.put(f.read())


if __name__ == "__main__":
    if sys.argv[1] == "thread":
        threading.Thread(target=threading.Event().wait, args=(30,), daemon=True).start()
    here = worker.start_fork_server_here()
    ctx = worker.context()
    q = ctx.SimpleQueue()
    p = ctx.Process(target=server_cmdline, args=(q,))
    p.start()
    server = q.get()
    p.join()
    with open("/proc/self/cmdline", "rb") as f:
        mine = f.read()
    print(f"here={here} server_is_this_run={server == mine} fresh_server={b'multiprocessing.forkserver' in server}")
'''


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/cmdline"), reason="reads /proc (Linux)")
@pytest.mark.parametrize("how,expected", [
    ("plain", "here=True server_is_this_run=True fresh_server=False"),
    ("thread", "here=False server_is_this_run=False fresh_server=True"),  # a fork beside a thread is unsafe
    ("disabled", "here=False server_is_this_run=False fresh_server=True"),
])
def test_a_cpu_run_forks_its_fork_server_from_itself(tmp_path, how, expected):
    """A gate or fuzz session on the CPU starts its workers' fork server as a fork of itself, torch
    imported once (harness.running.worker.start_fork_server_here): its workers are forked from a process
    whose command line is the run's own. Beside a running thread, or with RMSNORM_FORK_SERVER_HERE=0,
    the usual server starts: a fresh interpreter."""
    probe = tmp_path / "probe.py"
    probe.write_text(_SERVER_PROBE)
    from tests._run import ROOT

    env = {"PYTHONPATH": str(ROOT)}  # a script's folder is its first import path: the clone's harness
    if how == "disabled":
        env["RMSNORM_FORK_SERVER_HERE"] = "0"
    code, out = run([str(probe), how], env=env, timeout=300)
    assert code == 0 and expected in out, out
