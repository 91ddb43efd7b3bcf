"""References: the seed card's ``rmsnorm_ref`` and float64 forward/backward references.

Every ``*_ref`` computes in float64 whatever the input dtype, so it is more precise than any
implementation it checks (float64 targets are checked against a bound that counts the
reference's own rounding too: see ``harness.judging.tolerance``).
"""

from __future__ import annotations

import torch


def rmsnorm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The seed card's reference, as written there (computes in the dtype it is given)."""
    inv_rms = torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps)
    return weight * x * inv_rms


def inv_rms_ref(x: torch.Tensor, eps: float) -> torch.Tensor:
    """1 / sqrt(mean(x^2) + eps) over the last dim, float64, shaped x.shape[:-1]."""
    x64 = x.to(torch.float64)
    return torch.rsqrt((x64 * x64).mean(dim=-1) + eps)


def forward_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, inv_rms) in float64."""
    inv = inv_rms_ref(x, eps)
    y = x.to(torch.float64) * inv.unsqueeze(-1) * weight.to(torch.float64)
    return y, inv


def backward_ref(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_x, grad_weight) of sum(grad_out * y) in float64, with the exact inv_rms.

    grad_x = inv * (g - xhat * mean(g * xhat)),  g = grad_out * weight, xhat = x * inv
    grad_weight = sum over rows of grad_out * x * inv
    """
    x64 = x.to(torch.float64)
    dy = grad_out.to(torch.float64)
    w = weight.to(torch.float64)
    inv = inv_rms_ref(x, eps).unsqueeze(-1)
    xhat = x64 * inv  # computed first so that no product leaves float64's range
    g = dy * w
    c = (g * xhat).mean(dim=-1, keepdim=True)
    grad_x = inv * (g - xhat * c)
    grad_w = (dy * xhat).reshape(-1, x.shape[-1]).sum(dim=0)
    return grad_x, grad_w


def eager_ref(x: torch.Tensor, weight: torch.Tensor, eps: float, grad_out: torch.Tensor | None = None):
    """Eager PyTorch in the input's dtype, as Hugging Face's LlamaRMSNorm computes it: x upcast
    (to float32, or kept in float64), normalised, rounded back to the input dtype, multiplied by
    the weight; gradients by autograd through those ops. Returns (y, grad_x, grad_weight), the
    gradients None without grad_out. The judge's bound is never tighter than a multiple of this
    one's error (harness.judging.judge)."""
    acc = torch.promote_types(x.dtype, torch.float32)
    with torch.enable_grad():
        xg = x.detach().requires_grad_(grad_out is not None)
        wg = weight.detach().requires_grad_(grad_out is not None)
        h = xg.to(acc)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        y = wg * h.to(x.dtype)
        if grad_out is None:
            return y.detach(), None, None
        gx, gw = torch.autograd.grad(y, (xg, wg), grad_out.to(y.dtype))
    return y.detach(), gx, gw
