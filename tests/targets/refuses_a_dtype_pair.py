"""Correct, but refuses one (x dtype, weight dtype) pair with a clear error: bfloat16 x with a float32
weight. It declares nothing: the gate infers the class from its refusals and passes it, stating the
contract so inferred."""

import torch

from tests.targets import correct_torch


def _pair(x, weight):
    if x.dtype == torch.bfloat16 and weight.dtype == torch.float32:
        raise TypeError("refuses_a_dtype_pair: expected a bfloat16 weight for bfloat16 x, but got float32")


def forward(x, weight, eps):
    _pair(x, weight)
    return correct_torch.forward(x, weight, eps)


def backward(grad_out, x, weight, inv_rms):
    _pair(x, weight)
    return correct_torch.backward(grad_out, x, weight, inv_rms)
