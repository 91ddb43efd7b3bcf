"""Verdicts on other people's kernels, on the CPU lane: a crash on an input the target otherwise accepts
fails the gate whatever the exception, an honest limit passes with the contract it comes to, and a
declared contract that leaves a law nothing to draw makes that law not applicable, never a coverage
failure (harness/judging/refusals.py; tests/test_refusals.py has the rules one by one)."""

import pytest

from tests._draw import drawn as draw_cases
from tests._run import run


def gate(*args, env=None):
    return run(["-m", "harness", "gate", "--device", "cpu", *args], env=env, timeout=900)


@pytest.mark.parametrize("target, laws, said", [
    ("crash_backward_short_rows", "test_backward_matches_reference and not large and not tall",
     "crashed on a valid input: backward raised IndexError: index 8 is out of bounds"),
    ("crash_odd_n_bfloat16", "test_forward_matches_reference and not large and not tall",
     "crashed on a valid input: forward raised RuntimeError: shape"),
    ("crash_many_rows", "test_forward_matches_reference_tall",
     "crashed on a valid input: forward raised IndexError: index "),
])
def test_a_crash_on_an_input_it_otherwise_accepts_fails_the_gate(tmp_path, target, laws, said):
    code, out = gate("--target", f"module:tests.targets.{target}", "--corpus", str(tmp_path), "--", "-k", laws)
    assert code == 1, out[-3000:]
    assert said in out and "no class of inputs explains this refusal" in out, out[-3000:]
    assert "nearest accepted: " in out and "replay: " in out, out[-3000:]


def refused_pair_passes(target: str, corpus, env=None) -> str:
    """The gate on a target that refuses bfloat16 x with a float32 weight, and nothing else: it passes, with the
    class inferred and the contract to declare said (tests/test_triton_interpreter.py judges a Triton one).
    Returns the output."""
    code, out = gate("--target", target, "--corpus", str(corpus), "--", "-k",
                     "test_forward_matches_reference and not large and not tall", env=env)
    assert code == 0, out[-3000:]
    assert "forward refuses dtype=bfloat16&weight_dtype=float32: " in out, out[-3000:]
    assert ("declare it with --exclude 'dtype=bfloat16&weight_dtype=float32', or RMSNORM_CONTRACT = "
            '{"exclude": ["dtype=bfloat16&weight_dtype=float32"]}') in out, out[-3000:]
    return out


def test_a_refused_dtype_pair_passes_with_the_contract_it_comes_to(tmp_path):
    refused_pair_passes("module:tests.targets.refuses_a_dtype_pair", tmp_path)


@pytest.mark.parametrize("declared, not_applicable", [
    (["--layouts", "contiguous", "--weight-layouts", "contiguous"],
     "test_strided_equals_contiguous (not applicable: the contract's layouts are all contiguous"),
    (["--dtypes", "float32", "--layouts", "contiguous", "--weight-layouts", "contiguous", "--no-zero-rows"],
     "test_strided_equals_contiguous (not applicable: the contract's layouts are all contiguous"),
])
def test_a_correct_kernel_declared_narrow_passes_and_names_what_is_not_applicable(tmp_path, declared, not_applicable):
    code, out = gate("--target", "module:tests.targets.contiguous_only", *declared, "--corpus", str(tmp_path), "--",
                     "-k", "test_strided_equals_contiguous or test_rows_independent")
    assert code == 0, out[-3000:]
    assert not_applicable in out, out[-3000:]
    assert "FAIL" not in out, out[-3000:]


def test_a_kernel_declared_float32_only_draws_float32_past_2_31_elements(monkeypatch):
    """The law past 2^31 elements once drew 16-bit floats only, and failed coverage for a kernel declared
    float32: it draws the contract's narrowest dtype now."""
    drawn = draw_cases(monkeypatch, {"dtypes": ["float32"], "max_n": 4096}, "beyond_2_31_elements", n=30)
    assert {c.dtype for c in drawn} == {"float32"} and all(c.numel > 1 << 31 and c.n <= 4096 for c in drawn)
