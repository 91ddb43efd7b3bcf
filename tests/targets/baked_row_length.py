"""Broken on purpose, as a kernel compiled on first use whose cache key is too coarse: compiled once per
power-of-two block of N and dtype, with the first N of the block baked in, so a later N of the same block
divides its sum of squares by the wrong length. Every case is right in a fresh process; the second row
length of a block in one process is wrong."""

import torch

from tests.targets import correct_torch

_BAKED: dict = {}


def forward(x, weight, eps):
    n = x.shape[-1]
    baked = _BAKED.setdefault((1 << max(0, (n - 1).bit_length()), x.dtype), n)
    y, inv = correct_torch.forward(x, weight, eps)
    if baked == n:
        return y, inv
    xf = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    inv = torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) / baked + eps)
    return (xf * inv * weight.to(xf.dtype)).to(x.dtype), inv.squeeze(-1)


backward = correct_torch.backward
