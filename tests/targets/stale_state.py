"""Broken on purpose: right answers one call at a time, but backward uses the inv_rms of the last forward
(kept in the module) rather than the one it is handed: a model's first layer gets the last layer's."""

from tests.targets import correct_torch

_last = {}


def forward(x, weight, eps):
    y, inv = correct_torch.forward(x, weight, eps)
    _last["inv"] = inv
    return y, inv


def backward(grad_out, x, weight, inv_rms):
    kept = _last.get("inv")
    use = kept if kept is not None and kept.shape == inv_rms.shape and kept.device == inv_rms.device else inv_rms
    return correct_torch.backward(grad_out, x, weight, use)
