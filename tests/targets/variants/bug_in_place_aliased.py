"""Broken: an in-place fused add that takes a residual aliasing x and writes both outputs through it."""

import torch  # noqa: F401

from tests.targets.variants import kit

RMSNORM_CONTRACT = {"residual": "in_place"}


def forward(x, weight, eps, residual):
    with torch.no_grad():
        y, s = kit.forward(x, weight, eps, residual)
        x.copy_(y)
        residual.copy_(s)
