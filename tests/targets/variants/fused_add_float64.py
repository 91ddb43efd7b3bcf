"""Correct: an in-place fused add with a float32 residual stream that computes in float64 and rounds each output
once. Where float32 statistics leave their range (a zero sum beside an eps that float32 flushes to 0) it keeps
eps, so a row float32 makes NaN is 0 here: a right answer, as float32's is."""

import torch

from tests.targets.variants.fused_add_in_place import kit_check_alias

RMSNORM_CONTRACT = {"residual": "in_place", "residual_dtype": "float32", "order": "multiply_in_float32"}


def forward(x, weight, eps, residual):
    kit_check_alias(x, residual)
    if x.dtype != torch.float64 and residual.dtype != torch.float32:
        raise TypeError(f"fused_add_float64: expected a float32 residual stream, but got {residual.dtype}")
    with torch.no_grad():
        s = x.to(torch.float64) + residual.to(torch.float64)
        inv = torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps) if s.numel() else s
        x.copy_((s * inv * weight.to(torch.float64)).to(x.dtype))
        residual.copy_(s.to(residual.dtype))
