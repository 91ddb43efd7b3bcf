"""Broken: declares cast-then-multiply (x_hat rounded to x's dtype, then times the weight) but multiplies by the
weight upcast to float32 and rounds once."""

import torch  # noqa: F401

from tests.targets.variants import kit

RMSNORM_CONTRACT = {"dtypes": ["float32", "float16", "bfloat16"], "order": "cast_then_multiply"}


def forward(x, weight, eps):
    return kit.forward(x, weight, eps, order="multiply_in_float32")[0]
