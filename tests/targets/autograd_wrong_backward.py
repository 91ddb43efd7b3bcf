"""A forward-only RMSNorm (no backward of the card's form) whose y comes from an autograd.Function with a wrong
backward: grad_x = dy * w * inv_rms, the projection term left out. Its forward is right; a model training
through it gets wrong gradients, which the gate judges through autograd."""

import torch


class _Norm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        inv = torch.rsqrt(x.to(acc).pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, inv)
        return (x.to(acc) * inv * weight.to(acc)).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight, inv = ctx.saved_tensors
        acc = inv.dtype
        gx = (dy.to(acc) * weight.to(acc) * inv).to(x.dtype)
        gw = (dy.to(acc) * x.to(acc) * inv).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
        return gx, gw, None


def forward(x, weight, eps):
    return _Norm.apply(x, weight, eps)
