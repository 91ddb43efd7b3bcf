"""Broken: declares cast-then-multiply (Llama) but multiplies in float32 whenever a residual is passed."""

import torch  # noqa: F401

from tests.targets.variants import kit

RMSNORM_CONTRACT = {"residual": "returned", "order": "cast_then_multiply"}


def forward(x, weight, eps, residual):
    return kit.forward(x, weight, eps, residual, order="cast_then_multiply", bug="cast_dropped_with_residual")
