"""Broken on purpose: the last column of each row comes out as zero when N % 8 == 7 (a vector
tail skipped, into zeroed memory). Otherwise correct."""

import torch

from tests.targets import correct_torch


def forward(x, weight, eps):
    y, inv = correct_torch.forward(x, weight, eps)
    if x.shape[-1] % 8 == 7:
        out = torch.zeros_like(y)
        out[..., :-1] = y[..., :-1]
        return out, inv
    return y, inv


backward = correct_torch.backward
