"""What a user reads: a diagnosis that tells memory never written from a NaN that spread from another row,
Hypothesis' own failures translated into the gate's words (never its traceback or its advice to patch the
gate's tests), nothing written into the folder the gate runs from, and `import rmsnorm` with torch alone."""

import os
import re
import subprocess
import sys

import pytest
import torch

from harness.judging import judge
from harness.judging.laws.common import POISON_FINITE, POISON_NAN, poison
from tests._run import ROOT, run
from tests.targets import paired_rows

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_poison_is_told_apart_from_a_computed_nan(dtype):
    computed = torch.stack([torch.zeros((), dtype=dtype) / 0, torch.tensor(float("inf"), dtype=dtype) * 0,
                            torch.tensor(float("nan"), dtype=dtype), -torch.tensor(float("nan"), dtype=dtype)])
    assert not judge._poisoned(computed).any()
    size = torch.tensor([], dtype=dtype).element_size()
    filled = torch.full((8 * size // 2,), POISON_NAN, dtype=torch.int16).view(dtype)
    assert filled.isnan().all() and judge._poisoned(filled).all()
    finite = torch.full((8 * size,), POISON_FINITE, dtype=torch.uint8).view(dtype)
    judge.finite_poison_filled(True)
    try:
        assert finite.isfinite().all() and judge._poisoned(finite).all()
    finally:
        judge.finite_poison_filled(False)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_computed_value_equal_to_the_finite_poison_is_not_called_unwritten(dtype):
    # 0x4242 is 48.5 in bfloat16: a wrong backward computed exactly that (a bug hunt's finding). Unless the
    # output memory was filled with the finite poison before the call, an element holding it was computed.
    size = torch.tensor([], dtype=dtype).element_size()
    value = torch.full((8 * size,), POISON_FINITE, dtype=torch.uint8).view(dtype)
    assert not judge._poisoned(value).any()
    poison("cpu", [64], POISON_FINITE)  # a law's finite fill: now it is the poison
    try:
        assert judge._poisoned(value).all()
    finally:
        judge.finite_poison_filled(False)
    lines = judge.diagnose(value, torch.zeros(value.shape, dtype=torch.float64), torch.full(value.shape, 1e-3),
                           torch.ones(value.shape, dtype=torch.bool), torch.ones(value.shape, dtype=torch.bool))
    assert not any("never written" in line for line in lines), lines


def test_poison_fills_memory_with_the_nan_of_the_gates_own():
    torch.manual_seed(0)
    poison("cpu", [4096])
    # what the allocator hands out next is not guaranteed to be the poisoned block on the CPU: check the fill
    block = torch.full((2048,), POISON_NAN, dtype=torch.int16)
    assert judge._poisoned(block.view(torch.bfloat16)).all() and judge._poisoned(block.view(torch.float32)).all()


def test_a_nan_that_spread_from_another_row_is_named_as_that_never_as_unwritten():
    """tests/targets/paired_rows.py: two rows share one sum of squares, so the NaN of row 1 turns row 0 NaN.
    Every element was written: the old report said 260 of them held the poison."""
    torch.manual_seed(0)
    x = torch.randn(4, 300, dtype=torch.bfloat16)
    x[1, 7] = float("nan")
    weight = torch.randn(300, dtype=torch.bfloat16)
    y, inv = paired_rows.forward(x, weight, 1e-6)
    messages = "\n".join(m for mismatch in judge.judge_forward(y, inv, x, weight, 1e-6) for m in mismatch.messages)
    assert "a non-finite input of another row spread into them" in messages, messages
    assert "1 row(s) whose input is finite" in messages, messages
    assert "never written" not in messages, messages


def test_nan_read_from_a_strided_weights_gaps_is_named_as_the_stride_ignored():
    """A kernel that reads a strided weight as if contiguous reads the NaN the gate keeps in its gaps: the
    diagnosis names the stride, never a NaN spread from another row or a statistic off by a factor of 1."""
    torch.manual_seed(0)
    x = torch.randn(3, 16, dtype=torch.float32)
    x[2, 5] = float("inf")  # another row's non-finite input: the spread diagnosis must not claim the NaN
    store = torch.full((32,), float("nan"))
    store[::2] = torch.randn(16)
    weight = store[::2]
    read = store[:16]  # what a kernel that ignores the stride reads: every other element a gap
    y, inv = paired_rows.correct_torch.forward(x, read, 1e-6)
    messages = "\n".join(m for mismatch in judge.judge_forward(y, inv, x, weight, 1e-6) for m in mismatch.messages)
    assert "the weight read in storage order as if it were contiguous: its stride [2] was ignored" in messages, messages
    assert "spread" not in messages and "factor" not in messages, messages


def _backward(grad_out, x, weight, eps, *, mean_term=True, narrow=None):
    """grad_x and grad_weight of RMSNorm in float64, its mean term left out or every step rounded to narrow."""
    c = (lambda t: t.to(narrow).to(torch.float64)) if narrow else (lambda t: t)
    dy, xd, w = (c(t.to(torch.float64)) for t in (grad_out, x, weight))
    inv = c(torch.rsqrt(c((xd * xd).mean(-1, keepdim=True)) + eps))
    g = c(dy * w)
    gx = inv * g - (c(xd * c(inv ** 3) * c((xd * g).mean(-1, keepdim=True))) if mean_term else 0)
    return c(gx).to(x.dtype), c((dy * xd * inv).sum(0)).to(weight.dtype)


def _backward_messages(gx, gw, grad_out, x, weight, eps):
    inv = torch.rsqrt(x.to(torch.float64).pow(2).mean(-1) + eps).to(x.dtype)
    msgs, _ = judge.judge_backward(gx, gw, grad_out, x, weight, eps, inv)
    return "\n".join(m for mismatch in msgs for m in mismatch.messages)


@pytest.mark.parametrize("n", [9, 128, 1024])
def test_a_backward_whose_row_statistic_is_off_is_never_called_a_narrower_precision(n):
    """Backward eps ten times too large and a mean term left out move each row of grad_x by a * grad_out * weight
    + b * x: errors that can be the size of bfloat16 rounding, once diagnosed as computed at bfloat16 precision.
    A backward that is computed in bfloat16 still is."""
    torch.manual_seed(n)
    x, grad_out = torch.randn(4, n), torch.randn(4, n)
    weight = torch.randn(n)
    for wrong in (dict(eps=1e-1), dict(eps=1e-6, mean_term=False)):
        gx, gw = _backward(grad_out, x, weight, **wrong)
        messages = _backward_messages(gx, gw, grad_out, x, weight, 1e-6)
        assert "grad_x: diagnosis: each wrong row's error is a combination of grad_out * weight and x" in messages, \
            messages
        assert "precision" not in messages, messages
    gx, gw = _backward(grad_out, x, weight, 1e-6, narrow=torch.bfloat16)
    messages = _backward_messages(gx, gw, grad_out, x, weight, 1e-6)
    assert "grad_x: diagnosis: the errors are the size of bfloat16 rounding" in messages, messages
    assert "combination" not in messages, messages


def test_an_in_place_add_into_a_contiguous_copy_is_named_for_y_and_the_sum():
    """An in-place fused add that makes a strided x contiguous writes into the copy: y and the sum both still hold
    what was passed in, and the diagnosis names both, with the stride that points at the copy."""
    from harness.judging import variant as var

    v = var.Variant(residual="in_place", sum="float32")
    torch.manual_seed(1)
    x = torch.randn(4, 64)[:, ::2]
    residual = torch.randn(4, 32)
    exp = var.expect_forward(v, x, torch.ones(32), 1e-6, residual)
    alt_y, alt_res = var.alternatives(v, x, torch.ones(32), 1e-6, residual)
    y_msg = judge.compare("y", x, exp.y_ref, exp.bound_y, alternatives=tuple(alt_y))
    res_msg = judge.compare("residual_out", residual, exp.res_ref, exp.bound_res, alternatives=tuple(alt_res))
    messages = "\n".join(y_msg.messages + res_msg.messages)
    assert "y: diagnosis: y holds x as it was passed in: the normalised result was never written into x (x strided " \
           "here: written into a contiguous copy" in messages, messages
    assert "residual_out: diagnosis: residual_out holds the residual as it was passed in: the sum was never written " \
           "back (x strided here" in messages, messages


def _lenient_target(forward):
    import types

    from harness.judging.target import Target

    module = types.SimpleNamespace(forward=forward)
    return Target(module=module, spec=None, device=torch.device("cpu"), strict=False, has_ops=False, note="")


def test_a_forward_whose_y_is_x_itself_fails_as_aliasing():
    """A shortcut that returns x for an all-zero x has the right values: y in x's memory is the bug."""
    x = torch.zeros(2, 8)
    target = _lenient_target(lambda x, w, eps: x if not bool(x.any()) else x * 2)
    from harness.judging.target import LawFailure

    with pytest.raises(LawFailure, match="in the memory of its input x"):
        target.forward(x, torch.ones(8), 1e-6)
    target.forward(x + 1, torch.ones(8), 1e-6)  # a fresh y passes the check


def test_a_y_wider_than_promotion_gives_fails_even_for_other_peoples_targets():
    """A float32 y for a bfloat16 x and weight is no dtype any library returns (HF's float32 weight promotes to
    float32: that stays allowed)."""
    x = torch.randn(2, 8, dtype=torch.bfloat16)
    target = _lenient_target(lambda x, w, eps: x.float() * w.float())
    from harness.judging.target import LawFailure

    with pytest.raises(LawFailure, match="y: expected dtype torch.bfloat16, got torch.float32"):
        target.forward(x, torch.ones(8, dtype=torch.bfloat16), 1e-6)
    y, _ = target.forward(x, torch.ones(8, dtype=torch.float32), 1e-6)
    assert y.dtype == torch.float32


def test_elements_that_hold_the_poison_are_named_never_written():
    torch.manual_seed(0)
    x = torch.randn(4, 64, dtype=torch.float16)
    weight = torch.ones(64, dtype=torch.float16)
    y, inv = paired_rows.correct_torch.forward(x, weight, 1e-6)
    y = y.clone()
    y[2:].view(torch.int16).fill_(POISON_NAN)
    messages = "\n".join(m for mismatch in judge.judge_forward(y, inv, x, weight, 1e-6) for m in mismatch.messages)
    assert "128 of the 128 wrong elements still hold the poison" in messages and "never written" in messages, messages
    assert "spread" not in messages, messages


def test_a_nondeterministic_failure_is_named_with_its_case_and_replay_and_nothing_is_written_here(tmp_path):
    """tests/targets/unwritten_rows_flaky.py fails one call in two: Hypothesis raises FlakyFailure. The report
    says nondeterministic, gives the saved case and the replay line, and prints none of Hypothesis' traceback,
    its advice to `git apply` a patch to the gate's tests, or "stopped while shrinking"; and the folder the
    gate ran from stays empty."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    code, out = run(["-m", "harness", "gate", "--device", "cpu", "--target",
                     "module:tests.targets.unwritten_rows_flaky", "--corpus", str(tmp_path / "corpus"), "--", "-k",
                     "test_strided_equals_contiguous"], cwd=cwd, env=env, timeout=900)
    assert code == 1, out[-3000:]
    assert "[nondeterministic]" in out and "replay: " in out, out[-3000:]
    assert any((tmp_path / "corpus").rglob("*.json")), out[-3000:]
    for noise in ("Traceback", "FlakyFailure", "ExceptionGroup", "git apply", ".hypothesis/patches",
                  "stopped while shrinking"):
        assert noise not in out, (noise, out[-3000:])
    assert not re.search(r"\.py:\d+", out), out[-3000:]  # a traceback's file:line
    assert list(cwd.iterdir()) == [], list(cwd.iterdir())


BLOCK = """
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("hypothesis", "pytest", "_pytest", "harness", "xdist"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
sys.meta_path.insert(0, Blocked())
for name in list(sys.modules):
    if name.split(".")[0] in ("hypothesis", "pytest", "_pytest", "harness", "xdist"):
        del sys.modules[name]
"""


def test_rmsnorm_imports_and_runs_with_torch_alone():
    """A model author's environment: torch, no hypothesis, no pytest, no gate. RMSNorm builds, runs forward
    and backward, and pulls in none of them."""
    script = BLOCK + """
import torch
from rmsnorm import RMSNorm, rms_norm
x = torch.randn(3, 64, dtype=torch.float32, requires_grad=True)
norm = RMSNorm(64)
norm(x).pow(2).sum().backward()
assert x.grad is not None and norm.weight.grad is not None
assert rms_norm(x.detach(), torch.ones(64), 1e-6).shape == (3, 64)
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"hypothesis", "pytest", "_pytest", "harness"})
print("loaded:", loaded)
"""
    p = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=900,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "loaded: []" in p.stdout, p.stdout


def test_the_gate_without_its_extra_says_what_to_install():
    script = BLOCK.replace('"harness", ', "") + """
from harness.cli import main
sys.exit(main(["gate", "--budget", "5"]))
"""
    p = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, (p.returncode, p.stderr[-3000:])
    assert "the gate needs " in p.stderr and ", which is not installed here" in p.stderr, p.stderr
    assert 'pip install "rmsnorm-gate[gate]"' in p.stderr, p.stderr
    assert "Traceback" not in p.stderr, p.stderr


def test_a_nondeterministic_error_of_the_harness_is_named_not_hidden(monkeypatch):
    """A kernel lane's mutate reported the unmutated sources' flaky failure as `?` with nothing saved: the
    first run had raised the harness's own error (not the gate's failure), and only Hypothesis' words were
    kept. What was raised is named."""
    from hypothesis.errors import FlakyFailure

    from harness.running import report

    class _Session:
        class tally:
            unfinished = {}

    monkeypatch.setattr(report._state, "current", lambda: _Session)
    e = FlakyFailure("Hypothesis test_forward_matches_reference(case=...) produces unreliable results: Falsified on "
                     "the first call but did not on a subsequent one",
                     [RuntimeError("law forward_matches_reference failed inside the harness:\nOutOfMemoryError: CUDA "
                                   "out of memory. Tried to allocate 2.00 GiB")])
    got = report.translate("test_forward_matches_reference", "forward_matches_reference", e)
    assert "[nondeterministic]" in got and "RuntimeError: law forward_matches_reference failed inside the harness: " \
        "OutOfMemoryError: CUDA out of memory" in got, got
    assert "unreliable results" not in got, got


def test_a_backward_that_writes_into_its_saved_x_fails_gradcheck_as_the_targets_fault():
    """gradcheck calls the backward again on the tensors autograd saved: one the target's backward wrote into
    raised torch's RuntimeError inside the law, reported as the harness's own error."""
    import types

    from harness.judging.cases import Case
    from harness.judging.laws import numerics
    from harness.judging.target import LawFailure, Target
    from harness.running.spec import TargetSpec

    def forward(x, w, eps):
        inv = torch.rsqrt((x.double() ** 2).mean(-1) + eps)
        stat = torch.float64 if x.dtype == torch.float64 else torch.float32
        return (x.double() * inv[..., None] * w.double()).to(x.dtype), inv.to(stat)

    def backward(dy, x, w, inv):
        a, r, g = x.double(), inv.double()[..., None], dy.double() * w.double()
        gx = r * (g - a * r * r * (a * g).mean(-1, keepdim=True))
        gw = (dy.double() * a * r).reshape(-1, x.shape[-1]).sum(0)
        x.mul_(1.0000001)  # the bug: scratch space in the caller's x
        return gx.to(x.dtype), gw.to(w.dtype)

    target = Target(module=types.SimpleNamespace(forward=forward, backward=backward),
                    spec=TargetSpec.parse("module:scratch_in_x"), device=torch.device("cpu"), strict=False,
                    has_ops=False, note="")
    with pytest.raises(LawFailure, match="was modified in place by the target's forward or backward"):
        numerics.gradcheck(target, Case(shape=(2, 8)))


def test_rows_left_out_are_named_as_left_out_not_as_a_statistic_off():
    """A row left as zeros was "the reference times a factor (0): the statistic is off"; a grad_weight summed over
    the first of two leading dimensions was "the statistic of some rows is off". Each is named for what it is."""
    from harness.judging.reference import backward_ref, forward_ref

    torch.manual_seed(0)
    x, weight, grad_out = torch.randn(2, 3, 64), torch.randn(64), torch.randn(2, 3, 64)
    y, inv = forward_ref(x, weight, 1e-6)
    y_bad = y.float().clone()
    y_bad[1, 2] = 0
    messages = "\n".join(m for mm in judge.judge_forward(y_bad, None, x, weight, 1e-6) for m in mm.messages)
    assert "each wrong row is 0 where the reference is not (1 row(s); row 5 first): the row was never computed" \
        in messages and "statistic" not in messages, messages
    gx, _ = backward_ref(grad_out, x, weight, 1e-6)
    gw_bad = (grad_out.double() * x.double() * inv[..., None])[0].sum(0)  # the rows of d0 = 0 alone
    msgs, _ = judge.judge_backward(gx.float(), gw_bad.float(), grad_out, x, weight, 1e-6, inv.float())
    messages = "\n".join(m for mm in msgs for m in mm.messages)
    assert "grad_weight is the sum over 3 of the 6 rows: the terms of row(s) [3, 4, 5] are left out" in messages, \
        messages


def test_an_index_off_by_one_row_is_named_and_a_row_of_zeros_is_not():
    from harness.judging.reference import forward_ref

    torch.manual_seed(3)
    x, weight = torch.randn(6, 32), torch.randn(32)
    y, _ = forward_ref(x, weight, 1e-6)
    shifted = torch.cat([y[1:], y[-1:]]).float()  # row i holds row i + 1's result
    messages = "\n".join(m for mm in judge.judge_forward(shifted, None, x, weight, 1e-6) for m in mm.messages)
    assert "the wrong values are the reference's values of the next row" in messages, messages
    # Rows of one element: grad_x is 0 up to rounding, so a neighbour's value "explains" any 0 got.
    ref, r = torch.tensor([[1e-4], [0.0], [0.0]], dtype=torch.float64), torch.zeros(3, 1)
    m = judge.compare("grad_x", r, ref, torch.full((3, 1), 1e-6, dtype=torch.float64))
    assert m and "next row" not in str(m) and "previous row" not in str(m), m


def test_a_grad_weight_of_zero_rows_that_is_not_zero_is_judged_not_crashed_on():
    """grad_weight's diagnosis fits it to one vector a row: with no rows there are none to fit (it once raised
    inside the harness instead of failing the target)."""
    x, grad_out, weight = torch.randn(4, 0, 16), torch.randn(4, 0, 16), torch.randn(16)
    inv = torch.ones(4, 0)
    msgs, _ = judge.judge_backward(torch.zeros(4, 0, 16), torch.full((16,), 7.0), grad_out, x, weight, 1e-6, inv)
    assert "grad_weight: 16 of 16 compared elements wrong" in "\n".join(m for mm in msgs for m in mm.messages), msgs
