"""Correct: a fused residual add returning (y, the sum), the float32 sum normalised, multiplied in float32."""

import torch  # noqa: F401

from tests.targets.variants import kit

RMSNORM_CONTRACT = {"residual": "returned", "sum": "float32", "order": "multiply_in_float32"}


def forward(x, weight, eps, residual):
    return kit.forward(x, weight, eps, residual)
