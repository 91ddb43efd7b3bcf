"""A Gemma decoder's fused residual add and RMSNorm, as a model would write it in torch: the residual added in
float32, that sum normalised, times (1 + w) in float32, rounded once; the sum handed back as the new residual.
The gate judges it as a module target (README.md beside this file)."""

import torch

# What this norm is: the gate draws only inside it and holds the norm to every key.
RMSNORM_CONTRACT = {
    "dtypes": ["float32", "float16", "bfloat16"],  # it upcasts to float32 and no further
    "residual": "returned",  # forward(x, weight, eps, residual) -> (y, residual_out)
    "sum": "float32",  # the float32 sum is normalised, not its rounding to the residual's dtype
    "weight_offset": 1,  # Gemma's (1 + w), the 1 added after w is promoted
    "order": "multiply_in_float32",  # x_hat * (1 + w) in float32, one rounding to x's dtype
}


def forward(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor):
    s = x.float() + residual.float()
    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight.float())
    return y.to(x.dtype), s.to(residual.dtype)
