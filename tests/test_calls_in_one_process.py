"""Calls in one process. Law outputs_kept: two calls interleaved as two layers of a model make them; law
after_neighbours: the case after calls at neighbouring signatures. A target that hands out memory it writes
again, carries state from one call into the next, or caches compiled code under too coarse a key is right one
call at a time, so only these see it; a correct target passes them. And a failing case that passes alone, in
a fresh process, is said to."""

import contextlib

import pytest

from harness.judging.cases import Case
from harness.running.loading import default_device
from harness.running.worker import Runner
from tests._run import run

@contextlib.contextmanager
def worker(spec: str):
    """A started worker for spec on this machine's device (lenient), stopped afterwards."""
    r = Runner(spec, default_device(), strict=False)
    r.start()
    try:
        yield r
    finally:
        r.stop()


CASES = (Case(shape=(3, 8)), Case(shape=(2, 5, 12), dtype="bfloat16", layout="padded", seed=7),
         Case(shape=(4, 16), dtype="float16", weight_dtype="float32", grad_layout="broadcast", seed=3))


@pytest.mark.parametrize("spec", ["module:tests.targets.correct_torch", "module:tests.targets.torch_native"])
def test_correct_targets_keep_their_outputs(spec):
    with worker(spec) as r:
        for case in CASES:
            for law in ("outputs_kept", "after_neighbours"):
                v = r.check(law, case)
                assert v.status == "pass", (spec, law, case.short(), v.message)


def test_outputs_in_memory_the_target_writes_again_fail():
    with worker("module:tests.targets.kept_grad_weight") as r:
        v = r.check("outputs_kept", CASES[0])
        assert v.status == "fail"
        assert "call 2's grad_weight changed during call 1's backward" in v.message, v.message
        # The laws of one call at a time find nothing: each call's answer is right.
        for law in ("backward_matches_reference", "strided_equals_contiguous", "rows_independent"):
            assert r.check(law, CASES[1]).status == "pass", law


def test_state_carried_from_one_call_into_the_next_fails_and_is_named():
    with worker("module:tests.targets.stale_state") as r:
        v = r.check("outputs_kept", CASES[0])
        assert v.status == "fail"
        assert v.message.startswith("[call 1's backward, after call 2's] grad_x"), v.message
        assert "two calls interleaved" in v.message and "case: shape=[3, 8]" in v.message.splitlines()[-1]
        assert r.check("backward_matches_reference", CASES[0]).status == "pass"


def test_the_gate_fails_a_target_that_reuses_its_outputs(tmp_path):
    code, out = run(["-m", "harness", "gate", "--device", "cpu", "--target", "module:tests.targets.kept_grad_weight",
                     "--corpus", str(tmp_path / "corpus"), "--", "-k", "outputs_kept or backward_matches"])
    assert code == 1, out
    assert "FAILED properties/test_laws.py::test_outputs_kept" in out, out
    assert "test_backward_matches_reference" not in out.split("short test summary info")[-1], out
    assert list((tmp_path / "corpus").rglob("outputs_kept-*.json")), out


def test_a_failure_that_needs_earlier_calls_is_run_alone_and_says_so(tmp_path):
    """A case saved from a run is replayed alone; where alone it passes, the gate says so at once, and the
    saved case carries that, rather than leave a counterexample that replay calls not reproduced."""
    import json

    code, out = run(["-m", "harness", "gate", "--device", "cpu", "--target", "module:tests.targets.baked_row_length",
                     "--corpus", str(tmp_path / "corpus"), "--report-json", str(tmp_path / "report.json"),
                     "--", "-k", "test_forward_matches_reference"])
    assert code == 1, out
    assert "alone, in a fresh process of the target, this case passes: the failure needs calls made before it" in out
    saved = [json.loads(p.read_text()) for p in (tmp_path / "corpus").rglob("forward_matches_reference-*.json")]
    # forward_matches_reference's own cases and its tall ones (-k selects both) may each save one
    assert saved and all("this case passes: the failure needs calls made before it" in s["error"] for s in saved), saved
    failures = json.loads((tmp_path / "report.json").read_text())["tally"]["failures"]
    assert [f.get("alone") for f in failures] == ["pass"], failures
    code, out = run(["-m", "harness", "replay", next((tmp_path / "corpus").rglob("forward_matches_reference-*.json"))
                     .as_posix()])
    assert "NOT REPRODUCED" in out and "needs calls made before it" in out, out


def test_code_cached_under_too_coarse_a_key_fails_after_its_neighbours():
    case = Case(shape=(3, 7))
    with worker("module:tests.targets.baked_row_length") as r:
        v = r.check("after_neighbours", case)
        assert v.status == "fail"
        first = v.message.splitlines()[0]
        assert first.startswith("[call 2, at eps = 1e-05] y: ") and "wrong" in first, v.message
        assert "the calls before it were at neighbouring signatures" in v.message, v.message
    # The first call of each row length is right: one law a process shows nothing.
    with worker("module:tests.targets.baked_row_length") as fresh:
        assert fresh.check("forward_matches_reference", case).status == "pass"
