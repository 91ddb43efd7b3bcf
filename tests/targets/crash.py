"""Broken on purpose: the process dies (SIGSEGV) when x has more than 2 rows."""

import ctypes

from tests.targets import correct_torch


def forward(x, weight, eps):
    if x.dim() >= 2 and x.numel() // max(x.shape[-1], 1) > 2:
        ctypes.string_at(0)  # reads address 0: segmentation fault
    return correct_torch.forward(x, weight, eps)


backward = correct_torch.backward
