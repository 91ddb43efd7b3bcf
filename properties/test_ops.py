"""Laws of this project's torch.ops.rmsnorm operators (skipped for other targets)."""

from hypothesis import given, settings

from harness.session import check
from properties.strategies import cases, replay_corpus


@replay_corpus("opcheck")
@settings(max_examples=4)
@given(case=cases(max_elements=512, patterns=("normal",)))
def test_opcheck(case):
    check("opcheck", case)


@replay_corpus("compile_equals_eager")
@settings(max_examples=2)
@given(case=cases(max_elements=512, patterns=("normal",), many_rows=False))
def test_compile_equals_eager(case):
    check("compile_equals_eager", case)


@replay_corpus("cuda_graph_equals_eager")
@settings(max_examples=10)
@given(case=cases(max_elements=1 << 14, patterns=("normal",)))
def test_cuda_graph_equals_eager(case):
    check("cuda_graph_equals_eager", case)
