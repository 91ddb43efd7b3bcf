"""Broken: a Gemma (1 + w) norm whose backward writes grad_x into the grad_y autograd handed it."""

import torch  # noqa: F401

from tests.targets.variants import kit

RMSNORM_CONTRACT = {"weight_offset": 1, "order": "multiply_in_float32"}


def forward(x, weight, eps):
    return kit.GradIntoGradY.apply(x, weight, eps, 1.0)
