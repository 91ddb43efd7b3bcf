"""Correct: Gemma's x_hat * (1 + w), the 1 added in float32, one rounding at the end."""

import torch  # noqa: F401

from tests.targets.variants import kit

RMSNORM_CONTRACT = {"weight_offset": 1, "order": "multiply_in_float32"}


def forward(x, weight, eps):
    return kit.forward(x, weight, eps, offset=1.0)[0]
