"""Correct, except that its bfloat16 forward reads rows longer than 64 as pairs of elements, and so
raises RuntimeError for odd N there: an input it otherwise accepts (odd N in other dtypes, odd N up to
64 in bfloat16, even N past 64). No class of inputs explains the refusal: the gate must fail it."""

import torch

from tests.targets import correct_torch

backward = correct_torch.backward


def forward(x, weight, eps):
    n = x.shape[-1]
    if x.dtype == torch.bfloat16 and n > 64:
        x.reshape(-1, n // 2, 2)  # bfloat16 pairs, 32 bits at a time
    return correct_torch.forward(x, weight, eps)
