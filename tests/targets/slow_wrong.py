"""Wrong on rows of 100 or more (y 1% large) and slow (0.4 s a call), so that shrinking a failure
takes many slow calls (N searched down to 100): the wall-time budget must still bound the run."""

import time

from tests.targets import correct_torch


def forward(x, weight, eps):
    time.sleep(0.4)
    y, inv = correct_torch.forward(x, weight, eps)
    return (y * 1.01 if x.shape[-1] >= 100 else y), inv


backward = correct_torch.backward
