"""Correct, but takes only a contiguous weight on a 16-byte boundary (a clear error otherwise), as
extensions that load the weight in 16-byte vectors do: a gate must not fail it for that unless its
contract names the weight layouts it takes."""

from tests.targets import correct_torch


def _weight_ok(weight):
    if not weight.is_contiguous() or weight.data_ptr() % 16:
        raise ValueError("contiguous_weight_only: expected a contiguous weight on a 16-byte boundary, but got "
                         f"strides {list(weight.stride())} at an address {weight.data_ptr() % 16} bytes past one")


def forward(x, weight, eps):
    _weight_ok(weight)
    return correct_torch.forward(x, weight, eps)


def backward(grad_out, x, weight, inv_rms):
    _weight_ok(weight)
    return correct_torch.backward(grad_out, x, weight, inv_rms)
