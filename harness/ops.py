"""The harness's handle on operators: this project's (the ``rmsnorm`` package, which users import)
and the seed card's ``autograd.Function`` over any target module."""

from __future__ import annotations

import torch

from rmsnorm import RMSNorm, adopt, build_note, extension, rms_norm  # noqa: F401


def _stat(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def make_function(module) -> type[torch.autograd.Function]:
    """The seed card's ``CustomRMSNorm`` autograd.Function over any module with its contract.

    A module whose forward returns only y gets inv_rms computed here (float32, float64 for
    float64 input) for its backward.
    """

    class CustomRMSNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, eps):
            out = module.forward(x, weight, eps)
            if isinstance(out, (tuple, list)):
                y, inv_rms = out[0], out[1]
            else:
                y = out
                x64 = x.detach().to(torch.float64)
                inv_rms = torch.rsqrt((x64 * x64).mean(-1) + eps).to(_stat(x.dtype))
            ctx.save_for_backward(x, weight, inv_rms)
            ctx.eps = eps
            return y

        @staticmethod
        def backward(ctx, grad_out):
            x, weight, inv_rms = ctx.saved_tensors
            grad_x, grad_weight = module.backward(grad_out, x, weight, inv_rms)
            return grad_x, grad_weight, None

    return CustomRMSNorm
