"""Triton RMSNorms judged on the CPU lane, under Triton's interpreter, which the gate sets up itself in the
target's worker processes (harness/running/interpreter.py): the example of examples/triton_rmsnorm passes; each
of its six mutants (examples/triton_rmsnorm/mutants.py) is killed by the law that kills it, the kill confirmed
by replaying the killing case on the original; a refused dtype pair is not failed; a kernel the interpreter
cannot run is not judged (exit 2, one line); Liger-Kernel, where it is installed, is judged, its bfloat16 not.
Each gate is limited to a law or two: the whole gate on the example is measured by hand
(examples/triton_rmsnorm/README.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

from examples.triton_rmsnorm.mutants import MUTANTS
from tests._draw import drawn as draw_cases
from tests._run import ROOT, run
from tests.test_refusal_gates import refused_pair_passes

EXAMPLE = "module:examples.triton_rmsnorm.rmsnorm_triton"
SOURCE = ROOT / "examples" / "triton_rmsnorm" / "rmsnorm_triton.py"
FORWARD = "test_forward_matches_reference and not large and not tall"


def planted(tmp_path: Path, edits: list[tuple[str, str]], package: str = "planted_triton") -> tuple[str, dict]:
    """The example with edits (old text, found once, and its replacement), written as a package of its own
    (Triton reads a kernel's source from its file); the module target and the environment that imports it."""
    text = SOURCE.read_text()
    for old, new in edits:
        found = text.count(old)
        if found != 1:
            raise ValueError(f"planted: expected {old!r} once in {SOURCE.name}, but found it {found} times")
        text = text.replace(old, new)
    folder = tmp_path / "src" / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "rmsnorm_triton.py").write_text(text)
    path = os.pathsep.join(p for p in (str(tmp_path / "src"), os.environ.get("PYTHONPATH", "")) if p)
    return f"module:{package}.rmsnorm_triton", {"PYTHONPATH": path}


def gate(*args, env=None, timeout=600):
    return run(["-m", "harness", "gate", "--device", "cpu", *args], env=env, timeout=timeout)


def test_the_example_passes_under_the_interpreter_inside_its_caps(tmp_path):
    """No TRITON_INTERPRET given: the gate finds the Triton kernels and sets it in the worker alone."""
    env = {"TRITON_INTERPRET": ""}  # as a user's shell has it: unset (an empty value is off)
    code, out = gate("--target", EXAMPLE, "--corpus", str(tmp_path), "--", "-k",
                     "test_forward_matches_reference or test_row_offsets_past_2_31", env=env)
    assert code == 0, out[-4000:]
    assert f"lane: CPU (Triton interpreter) — target {EXAMPLE} on cpu" in out, out[-4000:]
    assert f"rmsnorm gate PASSED: lane CPU (Triton interpreter), target {EXAMPLE}" in out, out[-4000:]
    assert ("drawn under the interpreter's caps: at most 32 rows, 131,072 elements and N <= 65,536 a tensor"
            in out), out[-4000:]
    assert "Triton interpreter: TRITON_INTERPRET=1 in the target's worker processes only" in out, out[-4000:]
    assert re.search(r"hang limit: .* \(rows x \([\d.]+ ms \+ N x [\d.]+ us\), measured", out), out[-4000:]
    assert ("test_forward_matches_reference_large (not run under the interpreter (up to 2^24 elements a case; the "
            "cap is 2^17))") in out, out[-4000:]
    assert ("test_forward_matches_reference_tall (not run under the interpreter (65,535 rows and more a case; the "
            "cap is 32 rows))") in out, out[-4000:]
    assert re.search(r"\ninterpreted: \d+ calls timed, median [\d.]+ ms a call", out), out[-4000:]
    assert "compiling:" not in out, out[-4000:]
    for law in ("forward_matches_reference", "row_offsets_past_2_31"):
        assert re.search(rf"\n{law} +\d+ +\d+ +0 +0 ", out), out[-4000:]


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m["name"] for m in MUTANTS])
def test_each_triton_mutant_is_killed_and_the_original_passes_the_killing_case(tmp_path, mutant):
    target, env = planted(tmp_path, [(mutant["old"], mutant["new"])])
    # The budget cuts the shrinking short (a failing law's first case is kept either way), and the case is not run
    # again alone: this is about the kill, which replay confirms on the original below.
    code, out = gate("--target", target, "--corpus", str(tmp_path / "corpus"), "--budget", "4", "--", "-k",
                     mutant["law"], env={**env, "RMSNORM_REPLAY_ALONE": "0"})
    assert code == 1, out[-4000:]
    test = mutant["law"].split()[0]
    law = test[len("test_"):]
    # The law's failure block; or, where Hypothesis ended the test on a flaky failure (tail_mask_off_by_one reads
    # past the tensor, whatever lies there), the line of a law failed while shrinking, its first case saved.
    # A kill that comes and goes (reading past the tensor) is named nondeterministic, and is a kill.
    assert re.search(rf"^{test}: \[(fail|crash|nondeterministic)\] "
                     rf"|^FAILED {law} \[(fail|crash)\], stopped while shrinking", out, re.M), out[-4000:]
    saved = re.search(r"(?:^  saved: |its first failing case \(not shrunk\) is saved: )(\S+\.json)", out, re.M)
    assert saved, out[-4000:]
    case = Path(saved.group(1).rstrip(";"))
    assert json.loads(case.read_text())["law"] == law, case.read_text()
    code, out = run(["-m", "harness", "replay", str(case), "--target", EXAMPLE, "--device", "cpu"])
    assert code == 0 and "NOT REPRODUCED: the case passes now." in out, out[-4000:]


def test_a_triton_kernel_refusing_a_dtype_pair_is_not_failed_for_the_dtype(tmp_path):
    """The example, declaring nothing, and refusing bfloat16 x with a float32 weight: the class is inferred,
    bfloat16 with its own weight is judged (and passes), and the run passes."""
    target, env = planted(tmp_path, [
        ("RMSNORM_CONTRACT = {", "DECLARED_BY_THE_EXAMPLE = {"),
        ('''    if weight.device != x.device:''',
         '''    if x.dtype == torch.bfloat16 and weight.dtype == torch.float32:
        raise TypeError(f"rmsnorm: {who}: expected a bfloat16 weight for bfloat16 x, but got float32")
    if weight.device != x.device:'''),
    ], package="refuses_a_pair")
    out = refused_pair_passes(target, tmp_path / "corpus", env=env)
    assert "lane: CPU (Triton interpreter)" in out and "NOT JUDGED" not in out, out[-4000:]


def test_a_kernel_the_interpreter_cannot_run_is_not_judged(tmp_path):
    """libdevice reached as an attribute is the interpreter's stub, which returns None (the shims rebind only names
    bound to it): the interpreter cannot run the kernel, and the gate says so in one line, exit 2."""
    target, env = planted(tmp_path, [
        ("import triton.language as tl\n",
         "import triton.language as tl\nfrom triton.language.extra import libdevice\n"),
        ("root = tl.sqrt_rn(mean_sq)", "root = libdevice.sqrt_rn(mean_sq)"),
    ], package="libdevice_by_attribute")
    code, out = gate("--target", target, "--corpus", str(tmp_path / "corpus"), "--", "-k", FORWARD, env=env)
    assert code == 2, out[-4000:]
    line = f"rmsnorm gate NOT JUDGED: target {target} cannot run under Triton's interpreter: forward: InterpreterError"
    assert line in out, out[-4000:]
    assert re.search(r"rmsnorm_triton\.py line \d+: inv_rms = 1\.0 / root; neither failed nor passed", out), out[-4000:]
    assert "PASSED" not in out and "FAILED" not in out, out[-4000:]


# liger-kernel is pinned in requirements.txt: CI judges it, and a run without it says so.
needs_liger = pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None,
                                 reason="liger-kernel is not installed (requirements.txt pins it): peer:liger under "
                                        "the interpreter is not run")


@needs_liger
def test_liger_is_judged_under_the_interpreter_and_its_bfloat16_is_not(tmp_path):
    """Liger-Kernel 0.8.5 runs with the shims; it computes in bfloat16 (a product of two bfloat16 values), which the
    interpreter does on raw bits: bfloat16 is not judged, float32 and float16 are."""
    code, out = gate("--target", "peer:liger", "--corpus", str(tmp_path), "--profile", "dev", "--", "-k",
                     "test_backward_matches_reference and not large and not tall")
    assert code == 0, out[-4000:]
    assert "NOT JUDGED under the interpreter: bfloat16, drawn no more in this run" in out, out[-4000:]
    assert "rmsnorm gate PASSED (not judged under the interpreter: bfloat16): lane CPU (Triton interpreter)" in out, \
        out[-4000:]


@needs_liger
def test_liger_in_place_fails_under_the_interpreter_as_it_must(tmp_path):
    """Liger's in-place backward stores grad_x in grad_out's memory: under the interpreter too, the gate names it."""
    code, out = gate("--target", "peer:liger-inplace", "--dtypes", "float32", "--corpus", str(tmp_path), "--profile",
                     "dev", "--", "-k", "test_backward_matches_reference and not large and not tall")
    assert code == 1, out[-4000:]
    assert "lane CPU (Triton interpreter)" in out, out[-4000:]
    assert "in place" in out and "grad_out" in out, out[-4000:]


def test_what_is_triton_code_is_read_not_imported():
    import sys

    from harness.running.spec import TargetSpec

    before = set(sys.modules)
    assert TargetSpec.parse(EXAMPLE).interpreted("cpu")
    assert TargetSpec.parse("module:examples.triton_rmsnorm").interpreted("cpu")  # its package: the modules in it
    assert not TargetSpec.parse(EXAMPLE).interpreted("cuda")  # compiled on a GPU
    assert TargetSpec.parse("peer:liger").interpreted("cpu")
    assert not TargetSpec.parse("module:tests.targets.correct_torch").interpreted("cpu")
    assert not TargetSpec.parse("project").interpreted("cpu")
    assert not {m for m in set(sys.modules) - before if m.startswith(("examples", "triton"))}


def test_an_interpreted_run_draws_inside_the_caps(monkeypatch):
    from harness.judging.caps import INTERPRETER

    monkeypatch.setenv("RMSNORM_DEVICE", "cpu")
    # The contract set: no worker is asked for one.
    drawn = draw_cases(monkeypatch, {"dtypes": ["float32", "bfloat16"]}, n=60, spec=EXAMPLE)
    assert all(INTERPRETER.allows(c) for c in drawn), [c.short() for c in drawn if not INTERPRETER.allows(c)]
    assert max(c.rows for c in drawn) > 8 and max(c.n for c in drawn) > 4096, [c.shape for c in drawn]
