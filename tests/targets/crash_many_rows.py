"""Correct, except that its forward keeps each row's statistic in a buffer of 3,072 slots, and raises
IndexError once there are more rows than that: a crash on a valid input, which no class of inputs
explains (the number of rows is not a property a caller may be refused for)."""

import torch

from tests.targets import correct_torch

backward = correct_torch.backward
SLOTS = 3072


def forward(x, weight, eps):
    rows = x.numel() // max(x.shape[-1], 1)
    if rows:
        slots = torch.zeros(SLOTS)
        slots[torch.arange(rows)] = 1.0  # one slot a row
    return correct_torch.forward(x, weight, eps)
