"""Broken, in a way that comes and goes: the first call for each shape leaves every row past the 48th
unwritten (a kernel compiled on first use for each row length whose first launch is sized from a stale row
count, say), and every later call of that shape is right, so a failing case passes when it is run again.
The report must name it as nondeterministic with its saved case and replay line, print no Hypothesis
traceback, no advice to patch the gate's tests, and never say "stopped while shrinking" in a run nothing
stopped."""

import torch

from tests.targets import correct_torch

backward = correct_torch.backward
_SEEN: set = set()


def forward(x, weight, eps):
    y, inv = correct_torch.forward(x, weight, eps)
    n = x.shape[-1]
    rows = x.numel() // n if n else 0
    key = (tuple(x.shape), x.dtype)
    if rows > 48 and key not in _SEEN:
        _SEEN.add(key)
        out = torch.empty_like(y).reshape(-1, n)
        out[:48] = y.reshape(-1, n)[:48]
        return out.reshape(y.shape), inv
    return y, inv
