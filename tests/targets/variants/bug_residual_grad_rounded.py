"""Broken: a fused add with a float32 residual stream whose backward rounds the stream's gradient to x's 16-bit
dtype (as a kernel that writes one gradient buffer in x's dtype and hands it to both inputs): every layer's
residual gradient loses float32's precision."""

import torch

from tests.targets.variants import kit

RMSNORM_CONTRACT = {"residual": "returned", "residual_dtype": "float32"}


class _GradRoundedTo(torch.autograd.Function):
    """The identity forward; its backward rounds the gradient to a narrower dtype and back."""

    @staticmethod
    def forward(ctx, t, dtype):
        ctx.narrow = dtype
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.narrow).to(g.dtype), None


def forward(x, weight, eps, residual):
    stream = torch.float32 if x.dtype != torch.float64 else None
    return kit.forward(x, weight, eps, _GradRoundedTo.apply(residual, x.dtype), residual_dtype=stream)
