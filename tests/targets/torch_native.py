"""torch.nn.functional.rms_norm as a forward-only target (no backward): a correct peer."""

import torch


def forward(x, weight, eps):
    w = weight.to(x.dtype) if weight.dtype != x.dtype else weight
    if x.dtype in (torch.float16, torch.bfloat16) and weight.dtype == torch.float32:
        xf = x.float()
        return torch.nn.functional.rms_norm(xf, (x.shape[-1],), weight, eps).to(x.dtype)
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)
