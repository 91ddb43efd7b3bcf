"""Correct, but float32 only, as the seed card's kernel is: other dtypes are refused with the
error data_ptr<float>() raises. The suite must sort every refusal as rejected, in every law."""

import torch

from tests.targets import correct_torch


def _only_float32(*tensors):
    for t in tensors:
        if t.dtype != torch.float32:
            raise RuntimeError(f"expected scalar type Float but found {str(t.dtype).replace('torch.', '').title()}")


def forward(x, weight, eps):
    _only_float32(x, weight)
    return correct_torch.forward(x, weight, eps)


def backward(grad_out, x, weight, inv_rms):
    _only_float32(grad_out, x, weight, inv_rms)
    return correct_torch.backward(grad_out, x, weight, inv_rms)
