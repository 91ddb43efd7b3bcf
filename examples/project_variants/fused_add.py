"""rms_norm(x, weight, eps, residual): (y, residual_out), the float32 sum normalised and returned rounded to the
residual's dtype."""

from rmsnorm import rms_norm

RMSNORM_CONTRACT = {"residual": "returned", "sum": "float32", "order": "multiply_in_float32"}


def forward(x, weight, eps, residual):
    return rms_norm(x, weight, eps, residual)
