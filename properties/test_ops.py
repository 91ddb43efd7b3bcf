"""Laws of this project's torch.ops.rmsnorm operators (skipped for other targets)."""

from hypothesis import given, settings

from harness.running.session import check
from .strategies import replay_corpus, strategy_for


@replay_corpus("opcheck")
@settings(max_examples=4)
@given(case=strategy_for("opcheck"))
def test_opcheck(case):
    check("opcheck", case)


@replay_corpus("compile_equals_eager")
@settings(max_examples=2)
@given(case=strategy_for("compile_equals_eager"))
def test_compile_equals_eager(case):
    check("compile_equals_eager", case)


@replay_corpus("cuda_graph_equals_eager")
@settings(max_examples=10)
@given(case=strategy_for("cuda_graph_equals_eager"))
def test_cuda_graph_equals_eager(case):
    check("cuda_graph_equals_eager", case)
