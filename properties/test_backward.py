from hypothesis import given, settings

from harness.running.session import check
from .strategies import replay_corpus, strategy_for


@replay_corpus("backward_matches_reference")
@given(case=strategy_for("backward_matches_reference"))
def test_backward_matches_reference(case):
    check("backward_matches_reference", case)


@replay_corpus("gradcheck")
@given(case=strategy_for("gradcheck"))
def test_gradcheck(case):
    check("gradcheck", case)


@replay_corpus("autograd_grad_out")
@given(case=strategy_for("autograd_grad_out"))
def test_autograd_grad_out(case):
    check("autograd_grad_out", case)


@settings(max_examples=3)  # expensive: a few large tensors a run, more under the fuzz command
@given(case=strategy_for("backward_matches_reference_large"))
def test_backward_matches_reference_large(case):
    check("backward_matches_reference", case, drawn="backward_matches_reference_large")


@settings(max_examples=3)  # 65,535 to about 2^21 rows: grid and block-count thresholds
@given(case=strategy_for("backward_matches_reference_tall"))
def test_backward_matches_reference_tall(case):
    check("backward_matches_reference", case, drawn="backward_matches_reference_tall")
