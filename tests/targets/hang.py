"""Broken on purpose: never returns when N > 100."""

import time

from tests.targets import correct_torch


def forward(x, weight, eps):
    while x.shape[-1] > 100:
        time.sleep(1)
    return correct_torch.forward(x, weight, eps)
