from hypothesis import given

from harness.session import check
from properties.strategies import cases, replay_corpus


@replay_corpus("forward_matches_reference")
@given(case=cases())
def test_forward_matches_reference(case):
    check("forward_matches_reference", case)
