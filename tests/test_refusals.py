"""A refusal is a decision about a class of inputs, never an accident (harness/judging/refusals.py): each rule
of the inference on targets simulated in a few lines, so that every rule is shown in milliseconds; the
gates in tests/test_verdict.py show the same on real targets."""

import pytest

from harness.judging.cases import Case
from harness.judging.refusals import Inference, inferred_contract, report_lines


def simulated(forward_refuses, backward_refuses=lambda c: None):
    """run(law, case) for a target whose forward and backward refuse (return a message) or accept."""
    calls = []

    def run(law, case):
        calls.append((law, case))
        why = forward_refuses(case)
        if why:
            return "rejected", f"forward raised ValueError: {why}"
        if law.startswith("backward"):
            why = backward_refuses(case)
            if why:
                return "rejected", f"backward raised IndexError: {why}"
        return "pass", ""

    run.calls = calls
    return run


def judged(run, law, case, inf=None, accepted=()):
    inf = inf or Inference()
    for a in accepted:  # what the run accepted before, of the cases drawn earlier
        if run("backward_matches_reference", a)[0] == "pass":
            inf.note("backward_matches_reference", a, "pass")
    status, message = run(law, case)
    assert status == "rejected", (status, case)
    inf.note(law, case, status, message)
    return inf, inf.judge(law, case, message, run)


EARLIER = [Case(shape=(3, n), dtype=d, weight_dtype=d, seed=s)
           for s, (n, d) in enumerate([(8, "float32"), (96, "bfloat16"), (130, "float16"), (33, "float64"),
                                       (4096, "float32"), (7, "bfloat16")])]


def test_a_backward_that_crashes_on_short_rows_is_no_class():
    run = simulated(lambda c: None, lambda c: f"index 8 is out of bounds for dimension 0 with size {c.n}"
                    if c.n < 8 and c.rows > 1 else None)
    _, f = judged(run, "backward_matches_reference", Case(shape=(3, 5), dtype="bfloat16", weight_dtype="bfloat16"))
    assert f.explained_by is None, f.message
    assert "no class of inputs explains this refusal" in f.message and "at N = 8 was accepted" in f.message


def test_a_forward_that_crashes_on_odd_n_past_a_size_in_one_dtype_is_no_class():
    run = simulated(lambda c: f"shape '[-1, {c.n // 2}, 2]' is invalid" if c.dtype == "bfloat16" and c.n > 64
                    and c.n % 2 else None)
    inf, f = judged(run, "forward_matches_reference", Case(shape=(4, 101), dtype="bfloat16", weight_dtype="bfloat16"),
                    accepted=EARLIER)
    assert f.explained_by is None, f.message
    # Each candidate was asked and found not to be a whole class.
    assert "not the whole class: " in f.message and "dtype=bfloat16&n%2: [" in f.message, f.message


def test_a_forward_that_crashes_past_a_few_thousand_rows_is_no_class():
    run = simulated(lambda c: "index 3072 is out of bounds" if c.rows > 3072 else None)
    _, f = judged(run, "forward_matches_reference", Case(shape=(4000, 16)), accepted=EARLIER)
    assert f.explained_by is None, f.message
    assert "the same case with 2 rows was accepted" in f.message, f.message


def test_an_even_n_in_16_bits_is_a_class_of_two_conditions():
    run = simulated(lambda c: "expected an even N" if c.dtype in ("bfloat16", "float16") and c.n % 2 else None)
    inf, f = judged(run, "forward_matches_reference", Case(shape=(4, 101), dtype="bfloat16", weight_dtype="bfloat16"),
                    accepted=EARLIER)
    assert f.explained_by == "dtype=bfloat16&n%2", f.message
    # The next one in that class is explained without asking the target again.
    before = len(run.calls)
    _, f2 = judged(run, "forward_matches_reference", Case(shape=(2, 7), dtype="bfloat16", weight_dtype="bfloat16"),
                   inf=inf)
    assert f2.explained_by == "dtype=bfloat16&n%2" and len(run.calls) == before + 1


def test_one_refused_dtype_pair_is_not_a_refusal_of_the_dtype():
    run = simulated(lambda c: "no float32 weight for bfloat16" if c.dtype == "bfloat16" and c.weight_dtype == "float32"
                    else None)
    inf, f = judged(run, "forward_matches_reference", Case(shape=(2, 9), dtype="bfloat16", weight_dtype="float32"),
                    accepted=EARLIER)
    assert f.explained_by == "dtype=bfloat16&weight_dtype=float32", f.message
    c = inf.contract()
    assert c.inferred and not c.declared and c.allows(Case(shape=(2, 9), dtype="bfloat16", weight_dtype="bfloat16"))
    assert not c.allows(Case(shape=(2, 9), dtype="bfloat16", weight_dtype="float32"))
    flags, entry = c.declaration()
    assert flags == "--exclude 'dtype=bfloat16&weight_dtype=float32'", flags


def test_a_whole_dtype_and_the_longest_row_are_classes():
    run = simulated(lambda c: "no float64" if c.dtype == "float64" else ("N too long" if c.n > 4096 else None))
    inf, f = judged(run, "forward_matches_reference", Case(shape=(2, 9), dtype="float64", weight_dtype="float64"),
                    accepted=EARLIER[:3])
    assert f.explained_by == "dtype=float64", f.message
    inf, f = judged(run, "forward_matches_reference", Case(shape=(2, 5000)), inf=inf, accepted=EARLIER)
    assert f.explained_by == "n>4096", f.message
    c = inferred_contract(inf.to_json()["classes"])
    assert c.max_n_for("float32") == 4096 and c.dtypes == ("float32", "float16", "bfloat16")
    lines = report_lines(inf.to_json()["classes"], [])
    assert lines[0].startswith("contract inferred from the target's refusals"), lines
    assert "declare it with --dtypes float32,float16,bfloat16 --max-n 4096, or RMSNORM_CONTRACT = " in lines[0], lines


def test_a_backward_that_refuses_the_grad_out_autograd_hands_over_fails():
    run = simulated(lambda c: None, lambda c: "grad_out must be contiguous" if c.grad_layout != "contiguous" else None)
    _, f = judged(run, "backward_matches_reference", Case(shape=(3, 8), grad_layout="broadcast"), accepted=EARLIER)
    assert f.explained_by is None and "which autograd picks" in f.message, f.message


def test_a_refusal_that_comes_and_goes_on_one_input_fails():
    seen = set()

    def flaky(c):
        if c in seen:
            return None
        seen.add(c)
        return "busy"

    run = simulated(flaky)
    _, f = judged(run, "forward_matches_reference", Case(shape=(2, 9)), accepted=EARLIER)
    assert f.explained_by is None and "comes and goes" in f.message, f.message


def test_an_accepted_case_inside_an_inferred_class_is_a_contradiction():
    run = simulated(lambda c: "no float64" if c.dtype == "float64" else None)
    inf, f = judged(run, "forward_matches_reference", Case(shape=(2, 9), dtype="float64", weight_dtype="float64"),
                    accepted=EARLIER[:3])
    assert f.explained_by == "dtype=float64"
    inf.note("forward_matches_reference", Case(shape=(5, 5), dtype="float64", weight_dtype="float64"), "pass")
    assert inf.contradicted and not inf.classes["forward"], inf.contradicted


@pytest.mark.parametrize("layout", ["transposed", "col_step", "offset"])
def test_a_layout_of_x_is_a_class(layout):
    run = simulated(lambda c: "contiguous x only" if c.layout != "contiguous" else None)
    _, f = judged(run, "forward_matches_reference", Case(shape=(4, 9), layout=layout), accepted=EARLIER)
    assert f.explained_by == f"layout={layout}", f.message


def test_n_a_multiple_of_8_is_a_class_though_an_odd_n_made_even_is_refused_too():
    """An odd N moved to the next multiple of 2 is refused again by a target that needs N % 8: the class is
    found at the first multiple accepted, not given up (a correct kernel once failed on it)."""
    run = simulated(lambda c: f"x: expected N to be a multiple of 8, but got N = {c.n}" if c.n % 8 else None)
    inf, f = judged(run, "forward_matches_reference", Case(shape=(3, 101)), accepted=EARLIER[:1])
    assert f.explained_by == "n%8", f.message
    assert inferred_contract(inf.classes).n_multiple_of == 8


def test_a_one_element_tuple_in_a_refusal_is_the_same_cause_as_a_longer_one():
    """"strides (2,)" of a 1-D x and "strides (2, 1)" of its 2-D simplest case are one refusal."""
    from harness.judging.refusals import cause_of

    assert cause_of("x: expected a contiguous tensor, but got strides (2,)") == \
        cause_of("x: expected a contiguous tensor, but got strides (2, 1)")
    assert cause_of("shape [3,]") == cause_of("shape [3, 4]") == "shape [N]"
