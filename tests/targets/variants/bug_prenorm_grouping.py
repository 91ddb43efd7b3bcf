"""Broken: the prenorm backward computes (dres + dout) * dnorm, not dres + dout * dnorm."""

import torch  # noqa: F401

from tests.targets.variants import kit

RMSNORM_CONTRACT = {"residual": "returned"}


def forward(x, weight, eps, residual):
    return kit.PrenormGrouping.apply(x, residual, weight, eps)
