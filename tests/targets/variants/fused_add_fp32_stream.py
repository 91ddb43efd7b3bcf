"""Correct: a fused add whose residual stream is float32 beside 16-bit x (residual_in_fp32)."""

import torch  # noqa: F401

from tests.targets.variants import kit

RMSNORM_CONTRACT = {"residual": "returned", "residual_dtype": "float32"}


def forward(x, weight, eps, residual):
    return kit.forward(x, weight, eps, residual, residual_dtype=torch.float32 if x.dtype != torch.float64 else None)
