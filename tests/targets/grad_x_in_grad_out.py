"""Broken on purpose, as Liger-Kernel's default in_place=True is: backward stores grad_x in
grad_out's memory and returns it. The values are right; the caller's grad_out is gone."""

from tests.targets import correct_torch

forward = correct_torch.forward


def backward(grad_out, x, weight, inv_rms):
    gx, gw = correct_torch.backward(grad_out, x, weight, inv_rms)
    grad_out.copy_(gx)
    return grad_out, gw
