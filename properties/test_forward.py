from hypothesis import given

from harness.session import check
from properties.strategies import replay_corpus, strategy_for


@replay_corpus("forward_matches_reference")
@given(case=strategy_for("forward_matches_reference"))
def test_forward_matches_reference(case):
    check("forward_matches_reference", case)
