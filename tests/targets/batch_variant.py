"""Correct within rounding, but not batch invariant: from 64 rows on it adds each row's squares
in another order (the columns reversed), as kernels that switch paths with the number of rows
do. Only a bitwise batch law can tell it from a correct, invariant one."""

import torch

from tests.targets import correct_torch

SWITCH_ROWS = 64


def forward(x, weight, eps):
    n = x.shape[-1]
    rows = x.numel() // max(n, 1)
    if rows < SWITCH_ROWS:
        return correct_torch.forward(x, weight, eps)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(acc)
    inv = torch.rsqrt(xf.flip(-1).pow(2).sum(-1, keepdim=True) / n + eps)
    if weight.dtype == x.dtype:
        y = (xf * inv).to(x.dtype) * weight
    else:
        y = (xf * inv * weight.to(acc)).to(x.dtype)
    return y, inv.squeeze(-1)


backward = correct_torch.backward
