"""Laws that compare with float64: forward, backward, gradcheck, grad_out as autograd hands it
over, inf and NaN."""

from __future__ import annotations

import warnings

import torch
from torch.autograd.gradcheck import GradcheckError

from harness.judging.cases import Case, materialize
from harness.judging.laws.common import make_function
from harness.judging.target import LawFailure, NotApplicable, Rejected, Target
from harness.judging.laws.common import (_Adapter, _fail, backward_checked, compare_grads, forward_checked, inv_for_backward)
from harness.judging.laws.registry import law
from harness.judging.contract import of_target

@law()
def forward_matches_reference(target: Target, case: Case):
    """Forward y (and inv_rms when returned) agree with the float64 reference."""
    t = materialize(case, target.device)
    _, _, facts = forward_checked(target, t.x, t.weight, case.eps, case)
    return facts


@law(backward=True)
def backward_matches_reference(target: Target, case: Case):
    """Backward grad_x and grad_weight agree with the float64 reference."""
    t = materialize(case, target.device)
    _, inv, _ = forward_checked(target, t.x, t.weight, case.eps, case)
    inv = inv_for_backward(t.x, case.eps, inv)
    _, _, facts = backward_checked(target, t.grad_out, t.x, t.weight, case.eps, inv, case)
    return facts


# gradcheck's step and tolerances for each dtype it may run in. float64 and float32 as torch's own
# tests use them; float16 and bfloat16 from the worst a correct RMSNorm that computes in float32
# needed over 3,400 seeds of this law's inputs (|x| in [0.5, 1.5), N <= 8), doubled: steps of
# 2^-4 and 2^-2, which keep x + step exact in the dtype; there the law still catches a backward that
# leaves out the normalisation's correction term (the finer faults are backward_matches_reference's).
GRADCHECK_OPTS = {
    torch.float64: dict(eps=1e-6, atol=1e-5, rtol=1e-3),
    torch.float32: dict(eps=1e-3, atol=2e-3, rtol=2e-2),
    torch.float16: dict(eps=2.0 ** -4, atol=0.08, rtol=0.08),
    torch.bfloat16: dict(eps=2.0 ** -2, atol=0.12, rtol=0.12),
}
WIDEST_FIRST = ("float64", "float32", "float16", "bfloat16")


def gradcheck_plan(target: Target, c) -> tuple[list[tuple[torch.dtype, torch.dtype]], bool]:
    """The (x dtype, weight dtype) pairs gradcheck tries in order, and whether a refusal of the first
    may fall back to the next. Without a declared contract: float64, then float32 where a lenient
    target refuses float64. With one: the widest declared dtype only, its weight the same dtype
    where the contract allows that, else float32; never a dtype outside the contract (a correct
    kernel declared float32 once failed here in float64, which it computes in float32). c: the
    contract the target is held to (harness.judging.contract.of_target)."""
    if not c.declared:
        return [(torch.float64, torch.float64), (torch.float32, torch.float32)], not target.strict
    name = next(d for d in WIDEST_FIRST if d in c.dtypes)
    dt = getattr(torch, name)
    return [(dt, dt if "same" in c.weight_dtypes else torch.float32)], False


def _gradcheck_shape(case: Case, multiple: int) -> tuple[int, int]:
    """At most 3 rows of at most 8 (few perturbations), N kept a multiple of what the contract asks."""
    n = max(1, min(case.n, 8))
    if multiple > 1:
        n = multiple * max(1, min(case.n, max(8, multiple)) // multiple)
    return max(1, min(case.rows, 3)), n


@law(backward=True)
def gradcheck(target: Target, case: Case):
    """torch.autograd.gradcheck through the card's autograd.Function, in float64 (else float32)
    or, under a declared contract, in its widest dtype (gradcheck_plan)."""
    contract = of_target(target.module, target.spec)
    gen = torch.Generator().manual_seed(case.seed)
    rows, n = _gradcheck_shape(case, contract.n_multiple_of)
    mag = 0.5 + torch.rand(rows, n, generator=gen, dtype=torch.float64)
    sign = torch.where(torch.rand(rows, n, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
    x0 = mag * sign
    w0 = torch.randn(n, generator=gen, dtype=torch.float64)
    eps = max(case.eps, 1e-6)
    fn_cls = make_function(_Adapter(target))
    attempts, fall_back = gradcheck_plan(target, contract)
    last_reject = None
    for dt, wdt in attempts:
        opts = GRADCHECK_OPTS[dt]
        x = x0.to(dt).to(target.device).requires_grad_()
        w = w0.to(wdt).to(target.device).requires_grad_()
        try:
            with warnings.catch_warnings():  # "not of double precision": chosen on purpose, tolerances to match
                warnings.filterwarnings("ignore", message="Input #", category=UserWarning)
                torch.autograd.gradcheck(lambda a, b: fn_cls.apply(a, b, eps), (x, w), nondet_tol=0.0, **opts)
        except GradcheckError as e:
            where = f"{dt}" if wdt == dt else f"{dt}, weight {wdt}"
            raise LawFailure(f"gradcheck ({where}) failed for x of shape {[rows, n]}, eps={eps}:\n{e}") from None
        except RuntimeError as e:
            if "modified by an inplace operation" not in str(e):
                raise
            # gradcheck calls the backward again on the tensors autograd saved: one the target wrote into.
            raise LawFailure(f"gradcheck: a tensor saved for the backward (x, the weight or inv_rms) was modified in "
                             f"place by the target's forward or backward, so a second backward reads other values "
                             f"(torch: {str(e).splitlines()[0][:200]})") from None
        except Exception as e:  # noqa: BLE001
            if isinstance(e, Rejected) and fall_back and dt != attempts[-1][0]:
                last_reject = e
                continue
            raise
        if target.has_ops and dt == torch.float64:
            def both(a, b):
                return torch.ops.rmsnorm.forward(a, b, eps)

            try:
                torch.autograd.gradcheck(both, (x, w), nondet_tol=0.0, **opts)
            except GradcheckError as e:
                raise LawFailure(f"gradcheck of torch.ops.rmsnorm.forward (y and inv_rms) failed:\n{e}") from None
        return {"gradcheck_dtype": str(dt).replace("torch.", "")}
    raise last_reject


@law()
def nonfinite_propagates(target: Target, case: Case):
    """inf and NaN in x propagate to y (and the gradients) as the reference says."""
    if case.pattern != "nonfinite":
        raise NotApplicable("nonfinite_propagates needs the nonfinite pattern")
    t = materialize(case, target.device)
    _, inv, facts = forward_checked(target, t.x, t.weight, case.eps, case)
    if target.has_backward:
        backward_checked(target, t.grad_out, t.x, t.weight, case.eps, inv_for_backward(t.x, case.eps, inv), case)
    return facts


@law(backward=True)
def autograd_grad_out(target: Target, case: Case):
    """Gradients are right for grad_out as autograd hands it over: expanded from sum()
    (stride 0) and transposed."""
    t = materialize(case, target.device)
    fn = make_function(_Adapter(target))
    msgs = []
    x = t.x.detach().requires_grad_()
    w = t.weight.detach().requires_grad_()
    y = fn.apply(x, w, case.eps)
    y.sum().backward()
    ones = torch.ones_like(t.x)
    inv = inv_for_backward(t.x, case.eps, None)
    compare_grads(x.grad, w.grad, ones, t.x, t.weight, case.eps, inv, case, label="[y.sum()] ")
    if len(case.shape) >= 2:
        x = t.x.detach().requires_grad_()
        w = t.weight.detach().requires_grad_()
        y = fn.apply(x, w, case.eps)
        c = torch.randn(y.transpose(-1, -2).shape, generator=torch.Generator().manual_seed(case.seed), dtype=torch.float64).to(y.dtype).to(y.device)
        (y.transpose(-1, -2) * c).sum().backward()
        compare_grads(x.grad, w.grad, c.transpose(-1, -2), t.x, t.weight, case.eps, inv, case, label="[transposed grad_out] ")
    _fail(msgs, case)
    return {}

