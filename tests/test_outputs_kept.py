"""Law outputs_kept: two calls interleaved as two layers of a model make them. A target that hands out
memory it writes again, or carries state from one call into the next, is right one call at a time,
so only this law sees it; a correct target passes it."""

import pytest

from harness.cases import Case
from harness.target import default_device
from harness.worker import Runner
from tests._run import run

CASES = (Case(shape=(3, 8)), Case(shape=(2, 5, 12), dtype="bfloat16", layout="padded", seed=7),
         Case(shape=(4, 16), dtype="float16", weight_dtype="float32", grad_layout="broadcast", seed=3))


@pytest.mark.parametrize("spec", ["module:tests.targets.correct_torch", "module:tests.targets.torch_native"])
def test_correct_targets_keep_their_outputs(spec):
    r = Runner(spec, default_device(), strict=False)
    r.start()
    try:
        for case in CASES:
            v = r.check("outputs_kept", case)
            assert v.status == "pass", (spec, case.short(), v.message)
    finally:
        r.stop()


def test_outputs_in_memory_the_target_writes_again_fail():
    r = Runner("module:tests.targets.kept_grad_weight", default_device(), strict=False)
    r.start()
    try:
        v = r.check("outputs_kept", CASES[0])
        assert v.status == "fail"
        assert "call 2's grad_weight changed during call 1's backward" in v.message, v.message
        # The laws of one call at a time find nothing: each call's answer is right.
        for law in ("backward_matches_reference", "strided_equals_contiguous", "rows_independent"):
            assert r.check(law, CASES[1]).status == "pass", law
    finally:
        r.stop()


def test_state_carried_from_one_call_into_the_next_fails_and_is_named():
    r = Runner("module:tests.targets.stale_state", default_device(), strict=False)
    r.start()
    try:
        v = r.check("outputs_kept", CASES[0])
        assert v.status == "fail"
        assert v.message.startswith("[call 1's backward, after call 2's] grad_x"), v.message
        assert "two calls interleaved" in v.message and "case: shape=[3, 8]" in v.message.splitlines()[-1]
        assert r.check("backward_matches_reference", CASES[0]).status == "pass"
    finally:
        r.stop()


def test_the_gate_fails_a_target_that_reuses_its_outputs(tmp_path):
    code, out = run(["-m", "harness", "gate", "--device", "cpu", "--target", "module:tests.targets.kept_grad_weight",
                     "--corpus", str(tmp_path / "corpus"), "--", "-k", "outputs_kept or backward_matches"])
    assert code == 1, out
    assert "FAILED properties/test_laws.py::test_outputs_kept" in out, out
    assert "test_backward_matches_reference" not in out.split("short test summary info")[-1], out
    assert list((tmp_path / "corpus").rglob("outputs_kept-*.json")), out
