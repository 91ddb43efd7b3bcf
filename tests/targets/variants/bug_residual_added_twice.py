"""Broken: the residual is added twice (x + 2 residual)."""

import torch  # noqa: F401

from tests.targets.variants import kit

RMSNORM_CONTRACT = {"residual": "returned"}


def forward(x, weight, eps, residual):
    return kit.forward(x, weight, eps, residual, bug="residual_added_twice")
