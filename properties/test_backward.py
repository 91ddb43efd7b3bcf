from hypothesis import given

from harness.session import check
from properties.strategies import cases, replay_corpus


@replay_corpus("backward_matches_reference")
@given(case=cases())
def test_backward_matches_reference(case):
    check("backward_matches_reference", case)


@replay_corpus("gradcheck")
@given(case=cases(max_elements=64, patterns=("normal",), layouts=("contiguous",), grad_layouts=("contiguous",)))
def test_gradcheck(case):
    check("gradcheck", case)


@replay_corpus("autograd_grad_out")
@given(case=cases(patterns=("normal", "uniform", "spike")))
def test_autograd_grad_out(case):
    check("autograd_grad_out", case)
