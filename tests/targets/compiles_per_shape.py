"""Correct, and slow the first time it meets a row length, as a kernel compiled on first use for each
row length and dtype (Triton autotuning per N, CuTe DSL) is: the first forward or backward with a new
(N, dtypes) sleeps RMSNORM_COMPILE_SECONDS (default 0.5 s) in place of a compiler;
RMSNORM_COMPILE_SECONDS=0 is the same target without the compiles. Other calls take the time
correct_torch takes."""

import os
import time

from tests.targets import correct_torch

_SEEN: set = set()


def _compile(what, x, weight, eps):
    key = (what, x.shape[-1], x.dtype, weight.dtype)
    if key not in _SEEN:
        _SEEN.add(key)
        time.sleep(float(os.environ.get("RMSNORM_COMPILE_SECONDS", "0.5")))


def forward(x, weight, eps):
    _compile("forward", x, weight, float(eps))
    return correct_torch.forward(x, weight, eps)


def backward(grad_out, x, weight, inv_rms):
    _compile("backward", x, weight, None)
    return correct_torch.backward(grad_out, x, weight, inv_rms)
