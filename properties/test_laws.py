"""Laws that need no reference: invariances, determinism, memory hygiene, streams."""

from hypothesis import given

from harness.session import check
from properties.strategies import NONCONTIGUOUS, cases, replay_corpus


@replay_corpus("scale_invariance")
@given(case=cases(eps=(0.0,), patterns=("normal", "uniform", "constant", "spike")))
def test_scale_invariance(case):
    check("scale_invariance", case)


@replay_corpus("rows_independent")
@given(case=cases(min_rows=2))
def test_rows_independent(case):
    check("rows_independent", case)


@replay_corpus("strided_equals_contiguous")
@given(case=cases(layouts=NONCONTIGUOUS))
def test_strided_equals_contiguous(case):
    check("strided_equals_contiguous", case)


@replay_corpus("deterministic")
@given(case=cases(min_rows=2, max_elements=1 << 18))
def test_deterministic(case):
    check("deterministic", case)


@replay_corpus("inputs_unchanged")
@given(case=cases())
def test_inputs_unchanged(case):
    check("inputs_unchanged", case)


@replay_corpus("every_output_written")
@given(case=cases(patterns=("normal", "uniform", "spike", "constant")))
def test_every_output_written(case):
    check("every_output_written", case)


@replay_corpus("nonfinite_propagates")
@given(case=cases(patterns=("nonfinite",)))
def test_nonfinite_propagates(case):
    check("nonfinite_propagates", case)


@replay_corpus("honours_current_stream")
@given(case=cases(min_rows=1, patterns=("normal",)))
def test_honours_current_stream(case):
    check("honours_current_stream", case)
