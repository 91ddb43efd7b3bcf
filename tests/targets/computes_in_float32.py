"""Correct, and computes in float32 whatever it is given (as many Triton kernels do): a float64
input gets float32 precision back, so float64 is outside its contract. Declared inside float32
(and the half dtypes), every law must pass it; gradcheck once ran it in float64 regardless."""

import torch


def forward(x, weight, eps):
    xf = x.to(torch.float32)
    inv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    y = (xf * inv * weight.to(torch.float32)).to(x.dtype)
    return y, inv.squeeze(-1)


def backward(grad_out, x, weight, inv_rms):
    n = x.shape[-1]
    if inv_rms.numel() != x.numel() // max(n, 1) or grad_out.shape != x.shape:
        raise ValueError(f"expected inv_rms with one value a row and grad_out shaped like x, but got inv_rms of "
                         f"shape {list(inv_rms.shape)} and grad_out of shape {list(grad_out.shape)} for x of shape "
                         f"{list(x.shape)}")
    xf, dy, w = x.to(torch.float32), grad_out.to(torch.float32), weight.to(torch.float32)
    inv = inv_rms.to(torch.float32).unsqueeze(-1)
    g = dy * w
    c = inv * inv * (g * xf).sum(-1, keepdim=True) / n
    gx = (inv * (g - xf * c)).to(x.dtype)
    gw = (dy * xf * inv).reshape(-1, n).sum(0).to(weight.dtype)
    return gx, gw
