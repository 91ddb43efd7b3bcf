"""A correct RMSNorm written with torch ops, independent of this project's kernels: float32
statistics, and the Hugging Face rounding (normalised value rounded to the input dtype, then
multiplied by a same-dtype weight), grad_weight returned in float32. The suite must never alarm
on it."""

import torch


def _acc(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def forward(x, weight, eps):
    xf = x.to(_acc(x.dtype))
    inv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight.dtype == x.dtype:
        y = (xf * inv).to(x.dtype) * weight
    else:
        y = (xf * inv * weight.to(xf.dtype)).to(x.dtype)
    return y, inv.squeeze(-1)


def backward(grad_out, x, weight, inv_rms):
    acc = _acc(x.dtype)
    n = x.shape[-1]
    if inv_rms.numel() != x.numel() // max(n, 1) or grad_out.shape != x.shape:
        # Without this, a bad inv_rms of 65,535 elements for 65,536 rows broadcasts to 17 GB.
        raise ValueError(f"expected inv_rms with one value a row and grad_out shaped like x, but got inv_rms of "
                         f"shape {list(inv_rms.shape)} and grad_out of shape {list(grad_out.shape)} for x of shape "
                         f"{list(x.shape)}")
    xf, dy, w = x.to(acc), grad_out.to(acc), weight.to(acc)
    inv = inv_rms.to(acc).unsqueeze(-1)
    g = dy * w
    c = inv * inv * (g * xf).sum(-1, keepdim=True) / n
    gx = (inv * (g - xf * c)).to(x.dtype)
    gw = (dy * xf * inv).reshape(-1, n).sum(0)  # left in float32: autograd casts it to the weight's dtype
    return gx, gw
