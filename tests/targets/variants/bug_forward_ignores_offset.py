"""Broken: the forward leaves the offset out while its backward honours it."""

import torch  # noqa: F401

from tests.targets.variants import kit

RMSNORM_CONTRACT = {"weight_offset": 1}


def forward(x, weight, eps):
    return kit.IgnoresOffsetForward.apply(x, weight, eps, 1.0)
