"""Correct, but takes only contiguous x and grad_out (a clear error otherwise), and declares nothing:
every layout but one is refused, which the gate must explain by the layout."""

from tests.targets import correct_torch


def _contiguous(*ts):
    for t in ts:
        if not t.is_contiguous():
            raise ValueError("contiguous_only: this target only takes contiguous x, but got strides "
                             f"{list(t.stride())}")


def forward(x, weight, eps):
    _contiguous(x)
    return correct_torch.forward(x, weight, eps)


def backward(grad_out, x, weight, inv_rms):
    _contiguous(x, grad_out)
    return correct_torch.backward(grad_out, x, weight, inv_rms)
