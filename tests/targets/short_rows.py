"""Correct, but refuses rows longer than 4 elements (no category of the case explains it: N does),
and declares nothing. RMSNORM_SHORT_ROWS_DECLARE=1 makes it declare float32 with N up to 64 while
still refusing N > 4: a refusal inside its declared contract."""

import os

from tests.targets import correct_torch

if os.environ.get("RMSNORM_SHORT_ROWS_DECLARE") == "1":
    RMSNORM_CONTRACT = {"dtypes": ["float32"], "max_n": 64}


def _short(x):
    if x.shape[-1] > 4:
        raise ValueError(f"short_rows: expected N <= 4, but got N = {x.shape[-1]}")


def forward(x, weight, eps):
    _short(x)
    return correct_torch.forward(x, weight, eps)


def backward(grad_out, x, weight, inv_rms):
    _short(x)
    return correct_torch.backward(grad_out, x, weight, inv_rms)
