"""Broken: declared (1 + w), applies w alone."""

import torch  # noqa: F401

from tests.targets.variants import kit

RMSNORM_CONTRACT = {"weight_offset": 1}


def forward(x, weight, eps):
    return kit.forward(x, weight, eps, offset=1.0, bug="offset_dropped")[0]
