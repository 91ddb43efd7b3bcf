"""Laws that need no reference: invariances, determinism, memory hygiene, streams."""

from hypothesis import given, settings

from harness.running.session import check
from .strategies import replay_corpus, strategy_for


@replay_corpus("scale_invariance")
@given(case=strategy_for("scale_invariance"))
def test_scale_invariance(case):
    check("scale_invariance", case)


@replay_corpus("rows_independent")
@given(case=strategy_for("rows_independent"))
def test_rows_independent(case):
    check("rows_independent", case)


@replay_corpus("strided_equals_contiguous")
@given(case=strategy_for("strided_equals_contiguous"))
def test_strided_equals_contiguous(case):
    check("strided_equals_contiguous", case)


@replay_corpus("deterministic")
@given(case=strategy_for("deterministic"))
def test_deterministic(case):
    check("deterministic", case)


@replay_corpus("batch_invariant")
@settings(max_examples=12)  # each case runs some 50 batch sizes
@given(case=strategy_for("batch_invariant"))
def test_batch_invariant(case):
    check("batch_invariant", case)


@replay_corpus("inputs_unchanged")
@given(case=strategy_for("inputs_unchanged"))
def test_inputs_unchanged(case):
    check("inputs_unchanged", case)


@replay_corpus("every_output_written")
@given(case=strategy_for("every_output_written"))
def test_every_output_written(case):
    check("every_output_written", case)


@replay_corpus("outputs_kept")
@given(case=strategy_for("outputs_kept"))
def test_outputs_kept(case):
    check("outputs_kept", case)


@replay_corpus("after_neighbours")
@settings(max_examples=8)  # up to six calls a case, most at a signature new to a target compiling on first use
@given(case=strategy_for("after_neighbours"))
def test_after_neighbours(case):
    check("after_neighbours", case)


@replay_corpus("nonfinite_propagates")
@given(case=strategy_for("nonfinite_propagates"))
def test_nonfinite_propagates(case):
    check("nonfinite_propagates", case)


@replay_corpus("honours_current_stream")
@given(case=strategy_for("honours_current_stream"))
def test_honours_current_stream(case):
    check("honours_current_stream", case)


@settings(max_examples=3)  # about 4 GiB a tensor: a GPU law
@given(case=strategy_for("beyond_2_31_elements"))
def test_beyond_2_31_elements(case):
    check("beyond_2_31_elements", case)


@replay_corpus("row_offsets_past_2_31")
@settings(max_examples=10)  # 3 rows a case: it is the offsets, not the cases, that it is about
@given(case=strategy_for("row_offsets_past_2_31"))
def test_row_offsets_past_2_31(case):
    check("row_offsets_past_2_31", case)
