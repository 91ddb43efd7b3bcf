"""Broken: an in-place fused add that writes y but leaves the residual as it was."""

import torch  # noqa: F401

from tests.targets.variants import kit

RMSNORM_CONTRACT = {"residual": "in_place"}


def forward(x, weight, eps, residual):
    kit_check_alias(x, residual)
    with torch.no_grad():
        y, _ = kit.forward(x, weight, eps, residual)
        x.copy_(y)


def kit_check_alias(x, residual):
    lo_x, hi_x = x.data_ptr(), x.data_ptr() + x.numel() * x.element_size()
    lo_r, hi_r = residual.data_ptr(), residual.data_ptr() + residual.numel() * residual.element_size()
    if x.numel() and residual.numel() and lo_x < hi_r and lo_r < hi_x:
        raise ValueError("fused_add_in_place: expected a residual apart from x, but got one that overlaps it")
