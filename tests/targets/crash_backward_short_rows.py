"""Correct, except that its backward raises IndexError for rows shorter than 8 when there is more than
one row: a lookup sized for 8 lanes, read past the end of a shorter row. Its forward accepts those
inputs, so a model that calls it dies in training: the gate must fail it, whatever the exception's type."""

import torch

from tests.targets import correct_torch

forward = correct_torch.forward


def backward(grad_out, x, weight, inv_rms):
    n = x.shape[-1]
    if n < 8 and x.numel() > n:
        lanes = torch.arange(n)
        lanes[8]  # the eighth lane's partial sum, which a row this short does not have
    return correct_torch.backward(grad_out, x, weight, inv_rms)
