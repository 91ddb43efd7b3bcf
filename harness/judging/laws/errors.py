"""Bad inputs: every kind tried on each case, a clean error expected, the process still working."""

from __future__ import annotations

import torch

from harness.judging.cases import Case, materialize
from harness.judging.target import LawFailure, NotApplicable, Rejected, Target
from harness.judging.laws.common import forward_checked, inv_for_backward
from harness.judging.laws.registry import law

BAD_INPUTS = ("weight_longer", "weight_shorter", "weight_2d", "weight_dtype_mix", "eps_negative", "eps_nan",
              "eps_inf", "n_zero", "zero_dim", "int_dtype", "device_mismatch", "grad_shape", "inv_shape")


def _bad_call(kind: str, target: Target, case: Case, t):
    x, w, eps = t.x, t.weight, case.eps
    dev = target.device
    if kind == "weight_longer":
        return "forward", (x, torch.ones(case.n + 1, dtype=w.dtype, device=dev), eps)
    if kind == "weight_shorter":
        return "forward", (x, torch.ones(max(case.n - 1, 0), dtype=w.dtype, device=dev), eps)
    if kind == "weight_2d":
        return "forward", (x, w.reshape(1, -1), eps)
    if kind == "weight_dtype_mix":
        other = {torch.float32: torch.float64, torch.float64: torch.float16, torch.float16: torch.bfloat16,
                 torch.bfloat16: torch.float16}[x.dtype]
        return "forward", (x, w.to(other), eps)
    if kind == "eps_negative":
        return "forward", (x, w, -1e-3)
    if kind == "eps_nan":
        return "forward", (x, w, float("nan"))
    if kind == "eps_inf":
        return "forward", (x, w, float("inf"))
    if kind == "n_zero":
        return "forward", (torch.empty(*case.shape[:-1], 0, dtype=x.dtype, device=dev), torch.empty(0, dtype=w.dtype, device=dev), eps)
    if kind == "zero_dim":
        return "forward", (torch.tensor(1.0, dtype=x.dtype, device=dev), w[:1], eps)
    if kind == "int_dtype":
        return "forward", (torch.ones(case.shape, dtype=torch.int32, device=dev), w, eps)
    if kind == "device_mismatch":
        if not target.is_cuda:
            raise NotApplicable("device_mismatch needs a CUDA device")
        return "forward", (x, w.cpu(), eps)
    inv = inv_for_backward(x, eps, None)
    if kind == "grad_shape":
        return "backward", (t.grad_out[..., :-1] if case.n > 1 else t.grad_out.unsqueeze(0), x, w, inv)
    if kind == "inv_shape":
        return "backward", (t.grad_out, x, w, inv.reshape(-1)[:-1] if inv.numel() > 1 else torch.ones(3, dtype=inv.dtype, device=dev))
    raise ValueError(f"unknown bad input {kind!r}; expected one of {BAD_INPUTS}")


@law()
def bad_inputs_raise_cleanly(target: Target, case: Case, kind: str = ""):
    """Inputs outside the contract raise a clean error (this project: always), and the process
    and CUDA context keep working: a valid call afterwards is still right. Every kind of bad input
    is tried on each case (or only `kind`), so that no kind depends on which cases were drawn."""
    kinds = [kind] if kind else [k for k in BAD_INPUTS if (k != "device_mismatch" or target.is_cuda)
                                 and (k not in ("grad_shape", "inv_shape") or target.own_backward)]
    t = materialize(case, target.device)
    raised = 0
    for k in kinds:
        which, args = _bad_call(k, target, case, t)
        fn = target.module.forward if which == "forward" else target.module.backward
        try:
            target.call(f"{which} with bad input {k}", fn, *args)
            message = None
        except Rejected as e:
            message = str(e)
            raised += 1
        if message is None and target.strict:
            raise LawFailure(f"{which} accepted a bad input ({k}) without raising; expected a clear error\n  case: {case.short()}")
        if message is not None and target.strict and "rmsnorm:" not in message:
            raise LawFailure(f"{which} with bad input ({k}) raised an error that does not say what was expected: {message}")
        # The process (and CUDA context) must still work.
        forward_checked(target, t.x, t.weight, case.eps, case, label=f"[after bad {k}] ")
    return {"bad_inputs": len(kinds), "raised": raised}

