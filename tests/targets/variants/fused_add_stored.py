"""Correct: a fused add that normalises the sum as stored in the residual's dtype (HF eager layers), cast
then multiplied (Llama)."""

import torch  # noqa: F401

from tests.targets.variants import kit

RMSNORM_CONTRACT = {"residual": "returned", "sum": "stored", "order": "cast_then_multiply"}


def forward(x, weight, eps, residual):
    return kit.forward(x, weight, eps, residual, sum_in="stored", order="cast_then_multiply")
