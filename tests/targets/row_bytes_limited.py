"""Correct, but holds a row in one block, as many one-block Triton kernels do: rows of 64 KB or more
are refused (N < 16384 in float32, N < 32768 in bfloat16). Only a limit in bytes says so without
giving up half the bfloat16 range; declared with max_row_bytes 65535 it must pass."""

from tests.targets import correct_torch

RMSNORM_CONTRACT = {"dtypes": ["float32", "bfloat16"], "max_row_bytes": 65535}


def _fits(x):
    if x.shape[-1] * x.element_size() >= 65536:
        raise ValueError(f"expected a row of less than 65536 bytes, but got N={x.shape[-1]} in {x.dtype} "
                         f"({x.shape[-1] * x.element_size()} bytes)")


def forward(x, weight, eps):
    _fits(x)
    return correct_torch.forward(x, weight, eps)


def backward(grad_out, x, weight, inv_rms):
    _fits(x)
    return correct_torch.backward(grad_out, x, weight, inv_rms)
