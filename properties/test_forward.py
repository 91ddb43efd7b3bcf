from hypothesis import given, settings

from harness.running.session import check
from .strategies import replay_corpus, strategy_for


@replay_corpus("forward_matches_reference")
@given(case=strategy_for("forward_matches_reference"))
def test_forward_matches_reference(case):
    check("forward_matches_reference", case)


@settings(max_examples=3)  # expensive: a few large tensors a run, more under the fuzz command
@given(case=strategy_for("forward_matches_reference_large"))
def test_forward_matches_reference_large(case):
    check("forward_matches_reference", case, drawn="forward_matches_reference_large")


@settings(max_examples=3)  # 65,535 to about 2^21 rows: grid and block-count thresholds
@given(case=strategy_for("forward_matches_reference_tall"))
def test_forward_matches_reference_tall(case):
    check("forward_matches_reference", case, drawn="forward_matches_reference_tall")
