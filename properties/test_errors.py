from hypothesis import given

from harness.session import check
from properties.strategies import cases, replay_corpus


@replay_corpus("bad_inputs_raise_cleanly")
@given(case=cases(max_elements=4096, patterns=("normal",)))
def test_bad_inputs_raise_cleanly(case):
    """The kind of bad input is chosen by case.seed (harness.checks.BAD_INPUTS)."""
    check("bad_inputs_raise_cleanly", case)
