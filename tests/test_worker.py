"""The worker survives what targets do: crashes, hangs, rejections, wrong answers."""

from harness.cases import Case
from harness.worker import Runner
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


def test_a_target_that_rejects_everything_fails_the_run(tmp_path):
    code, out = pytest_run("properties/test_forward.py", "--target", "module:tests.targets.reject_all",
                           "--corpus", str(tmp_path))
    assert code != 0, out
    assert "rejected every case" in out and "dtype float32: rejected 100%" in out, out


def test_a_wrong_answer_is_shrunk_saved_and_replayed(tmp_path):
    code, out = pytest_run("properties/test_forward.py", "--target", "module:tests.targets.wrong_tail",
                           "--corpus", str(tmp_path), "--hypothesis-profile=ci")
    assert code == 1, out
    saved = sorted(tmp_path.glob("forward_matches_reference-*.json"))
    assert len(saved) == 1, (saved, out)
    import json

    doc = json.loads(saved[0].read_text())
    assert doc["shrunk"] and doc["case"]["shape"][-1] % 8 == 7, doc
    assert doc["case"]["shape"][-1] == 7, f"not shrunk to the smallest N: {doc['case']}"
    code, out = run(["-m", "harness", "replay", str(saved[0])], env={"RMSNORM_CORPUS": str(tmp_path)})
    assert code == 1 and "REPRODUCED [fail]" in out and "y:" in out, out


def test_the_suite_never_alarms_on_correct_peers(tmp_path):
    for target in ("module:tests.targets.correct_torch", "module:tests.targets.torch_native"):
        code, out = pytest_run("properties", "--target", target, "--corpus", str(tmp_path), "--hypothesis-profile=ci")
        assert code == 0, out
        assert not list(tmp_path.glob("*.json")), out
