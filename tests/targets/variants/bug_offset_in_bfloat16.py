"""Broken: 1 + w computed in the weight's 16-bit dtype before promotion (1 + 0.0039 -> 1.0 in bfloat16)."""

import torch  # noqa: F401

from tests.targets.variants import kit

RMSNORM_CONTRACT = {"weight_offset": 1, "order": "multiply_in_float32"}


def forward(x, weight, eps):
    return kit.forward(x, weight, eps, offset=1.0, bug="offset_in_dtype_before_promotion")[0]
