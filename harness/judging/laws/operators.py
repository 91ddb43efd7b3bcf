"""Laws of this project's operators: opcheck and torch.compile."""

from __future__ import annotations

import torch

import rmsnorm

from harness.judging import tolerance as tol
from harness.judging.cases import Case, materialize
from harness.judging.target import LawFailure, Target
from harness.judging.laws.common import _fail, inv_for_backward
from harness.judging.laws.registry import law

@law(ops=True)
def opcheck(target: Target, case: Case):
    """torch.library.opcheck passes for rmsnorm::forward and rmsnorm::backward."""
    t = materialize(case, target.device)
    x = t.x.detach().requires_grad_()
    w = t.weight.detach().requires_grad_()
    try:
        torch.library.opcheck(torch.ops.rmsnorm.forward.default, (x, w, case.eps))
        inv = inv_for_backward(t.x, case.eps, None)
        torch.library.opcheck(torch.ops.rmsnorm.backward.default, (t.grad_out, t.x, t.weight, inv))
    except torch.testing._internal.optests.OpCheckError as e:  # type: ignore[attr-defined]
        raise LawFailure(f"opcheck failed: {e}\n  case: {case.short()}") from None
    return {}


@law(ops=True)
def compile_equals_eager(target: Target, case: Case):
    """torch.compile(fullgraph=True) of a model using the operator equals eager, forward and
    backward."""
    t = materialize(case, target.device)

    def model(x, w):
        return rmsnorm.rms_norm(x * 2.0, w, case.eps) * 3.0

    torch._dynamo.reset()  # each case compiles afresh: no recompile limit across cases
    compiled = torch.compile(model, fullgraph=True, dynamic=False)
    outs = []
    for fn in (model, compiled):
        x = t.x.detach().requires_grad_()
        w = t.weight.detach().requires_grad_()
        y = fn(x, w)
        (y * t.grad_out).sum().backward()
        outs.append((y.detach(), x.grad, w.grad))
    msgs = []
    for name, a, b in zip(("y", "grad_x", "grad_weight"), outs[0], outs[1]):
        if not torch.allclose(a.double(), b.double(), rtol=4 * tol.unit_roundoff(a.dtype), atol=1e-30, equal_nan=True):
            msgs.append(f"{name}: compiled differs from eager by {float((a.double() - b.double()).abs().max()):.3g}")
    _fail(msgs, case)
    return {}

