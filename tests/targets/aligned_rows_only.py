"""Correct, but refuses rows whose length is not a multiple of 8 with a clear error, as kernels that
need aligned rows do (quack's CuTe DSL RMSNorm at N = 1, 36 or 461). Declared with
--n-multiple-of 8 (or RMSNORM_CONTRACT), it passes; undeclared, its refusals are explained."""

from tests.targets import correct_torch


def _aligned(x):
    if x.shape[-1] % 8:
        raise ValueError(f"aligned_rows_only: expected N a multiple of 8, but got N = {x.shape[-1]}")


def forward(x, weight, eps):
    _aligned(x)
    return correct_torch.forward(x, weight, eps)


def backward(grad_out, x, weight, inv_rms):
    _aligned(x)
    return correct_torch.backward(grad_out, x, weight, inv_rms)
