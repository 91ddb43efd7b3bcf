"""Correct: no weight (torch.nn.RMSNorm(elementwise_affine=False))."""

import torch  # noqa: F401

from tests.targets.variants import kit

RMSNORM_CONTRACT = {"weight": False}


def forward(x, weight, eps):
    assert weight is None, "no weight is declared"
    return kit.forward(x, None, eps)[0]
