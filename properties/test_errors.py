from hypothesis import given

from harness.session import check
from properties.strategies import replay_corpus, strategy_for


@replay_corpus("bad_inputs_raise_cleanly")
@given(case=strategy_for("bad_inputs_raise_cleanly"))
def test_bad_inputs_raise_cleanly(case):
    """The kind of bad input is chosen by case.seed (harness.checks.BAD_INPUTS)."""
    check("bad_inputs_raise_cleanly", case)
