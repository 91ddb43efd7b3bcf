"""Broken on purpose: right answers, but backward hands out grad_weight from a buffer it keeps per
length and dtype, so the next backward of that length overwrites what the last one returned (a
caller holding two layers' grad_weight, or one layer's across two steps, gets the last one twice)."""

import torch

from tests.targets import correct_torch

forward = correct_torch.forward
_kept = {}


def backward(grad_out, x, weight, inv_rms):
    gx, gw = correct_torch.backward(grad_out, x, weight, inv_rms)
    key = (tuple(gw.shape), gw.dtype, gw.device)
    if key not in _kept:
        _kept[key] = torch.empty_like(gw)
    return gx, _kept[key].copy_(gw)
