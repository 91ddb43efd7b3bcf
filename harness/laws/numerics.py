"""Laws that compare with float64: forward, backward, gradcheck, grad_out as autograd hands it
over, inf and NaN."""

from __future__ import annotations

import torch
from torch.autograd.gradcheck import GradcheckError

from ..cases import Case, materialize
from ..ops import make_function
from ..target import LawFailure, NotApplicable, Rejected, Target
from .common import _Adapter, _fail, backward_checked, compare_grads, forward_checked, inv_for_backward
from .registry import law

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


@law(backward=True)
def gradcheck(target: Target, case: Case):
    """torch.autograd.gradcheck through the card's autograd.Function (float64, else float32)."""
    gen = torch.Generator().manual_seed(case.seed)
    rows, n = max(1, min(case.rows, 3)), max(1, min(case.n, 8))
    mag = 0.5 + torch.rand(rows, n, generator=gen, dtype=torch.float64)
    sign = torch.where(torch.rand(rows, n, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
    x0 = mag * sign
    w0 = torch.randn(n, generator=gen, dtype=torch.float64)
    eps = max(case.eps, 1e-6)
    fn_cls = make_function(_Adapter(target))
    attempts = [(torch.float64, dict(eps=1e-6, atol=1e-5, rtol=1e-3)),
                (torch.float32, dict(eps=1e-3, atol=2e-3, rtol=2e-2))]
    last_reject = None
    for dt, opts in attempts:
        x = x0.to(dt).to(target.device).requires_grad_()
        w = w0.to(dt).to(target.device).requires_grad_()
        try:
            torch.autograd.gradcheck(lambda a, b: fn_cls.apply(a, b, eps), (x, w), nondet_tol=0.0, **opts)
        except GradcheckError as e:
            raise LawFailure(f"gradcheck ({dt}) failed for x of shape {[rows, n]}, eps={eps}:\n{e}") from None
        except Exception as e:  # noqa: BLE001
            if isinstance(e, Rejected) and dt == torch.float64 and not target.strict:
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

