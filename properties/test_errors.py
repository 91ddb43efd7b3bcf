from hypothesis import given

from harness.running.session import check
from .strategies import replay_corpus, strategy_for


@replay_corpus("bad_inputs_raise_cleanly")
@given(case=strategy_for("bad_inputs_raise_cleanly"))
def test_bad_inputs_raise_cleanly(case):
    """Every kind of bad input (harness.judging.laws.errors.BAD_INPUTS) is tried on each case."""
    check("bad_inputs_raise_cleanly", case)
