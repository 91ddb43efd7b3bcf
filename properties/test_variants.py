"""The laws of the RMSNorms people ship beside the card's: a fused residual add, (1 + w), no weight; and the
law of a declared rounding order (harness/judging/laws/variants.py)."""

from hypothesis import given, settings

from harness.running.session import check
from .strategies import replay_corpus, strategy_for


@replay_corpus("variant_forward_matches_reference")
@given(case=strategy_for("variant_forward_matches_reference"))
def test_variant_forward_matches_reference(case):
    check("variant_forward_matches_reference", case)


@replay_corpus("variant_backward_matches_reference")
@given(case=strategy_for("variant_backward_matches_reference"))
def test_variant_backward_matches_reference(case):
    check("variant_backward_matches_reference", case)


@replay_corpus("variant_gradcheck")
@settings(max_examples=20)  # about 90 calls a case
@given(case=strategy_for("variant_gradcheck"))
def test_variant_gradcheck(case):
    check("variant_gradcheck", case)


@replay_corpus("variant_every_output_written")
@given(case=strategy_for("variant_every_output_written"))
def test_variant_every_output_written(case):
    check("variant_every_output_written", case)


@replay_corpus("variant_outputs_kept")
@given(case=strategy_for("variant_outputs_kept"))
def test_variant_outputs_kept(case):
    check("variant_outputs_kept", case)


@replay_corpus("variant_bad_inputs_raise")
@settings(max_examples=20)
@given(case=strategy_for("variant_bad_inputs_raise"))
def test_variant_bad_inputs_raise(case):
    check("variant_bad_inputs_raise", case)


@replay_corpus("variant_aliased_residual")
@settings(max_examples=20)
@given(case=strategy_for("variant_aliased_residual"))
def test_variant_aliased_residual(case):
    check("variant_aliased_residual", case)


@replay_corpus("variant_two_layers")
@settings(max_examples=20)
@given(case=strategy_for("variant_two_layers"))
def test_variant_two_layers(case):
    check("variant_two_layers", case)


@replay_corpus("follows_declared_order")
@given(case=strategy_for("follows_declared_order"))
def test_follows_declared_order(case):
    check("follows_declared_order", case)
