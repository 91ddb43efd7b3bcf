"""rms_norm(x, weight, eps, weight_offset=1.0): Gemma's x_hat * (1 + w), the 1 added after w is promoted to
float32."""

from rmsnorm import rms_norm

RMSNORM_CONTRACT = {"weight_offset": 1, "order": "multiply_in_float32"}


def forward(x, weight, eps):
    return rms_norm(x, weight, eps, weight_offset=1.0)
