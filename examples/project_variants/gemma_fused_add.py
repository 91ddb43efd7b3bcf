"""rms_norm(x, weight, eps, residual, weight_offset=1.0): Gemma's (1 + w) with the fused residual add (FlashInfer's
gemma_fused_add_rmsnorm, returned rather than in place)."""

from rmsnorm import rms_norm

RMSNORM_CONTRACT = {"residual": "returned", "sum": "float32", "weight_offset": 1, "order": "multiply_in_float32"}


def forward(x, weight, eps, residual):
    return rms_norm(x, weight, eps, residual, weight_offset=1.0)
