"""Broken: an in-place fused add whose kernel takes rows as packed, row i at i * N from the first element,
whatever the row stride: rows padded to a wider stride (a slice of a wider buffer, every other row) are read
and written at the wrong places. A last dim that is not unit-stride goes through a contiguous copy (right)."""

import torch

from tests.targets.variants import kit
from tests.targets.variants.fused_add_in_place import kit_check_alias

RMSNORM_CONTRACT = {"residual": "in_place"}


def _rows_as_packed(t):
    n = t.shape[-1]
    return torch.as_strided(t, (t.numel() // n, n), (n, 1))  # the row stride taken to be N


def forward(x, weight, eps, residual):
    kit_check_alias(x, residual)
    with torch.no_grad():
        if x.numel() == 0:
            return
        if x.stride(-1) != 1 or residual.stride(-1) != 1:
            xc, rc = x.contiguous(), residual.contiguous()
            y, s = kit.forward(xc, weight, eps, rc)
            x.copy_(y)
            residual.copy_(s)
            return
        xp, rp = _rows_as_packed(x), _rows_as_packed(residual)
        y, s = kit.forward(xp.clone(), weight, eps, rp.clone())
        xp.copy_(y)
        rp.copy_(s)
