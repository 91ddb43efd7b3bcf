"""rms_norm with a float32 residual stream beside x of any dtype (flash-attn's residual_in_fp32): the sum kept in
float32, residual_out float32."""

from rmsnorm import rms_norm

RMSNORM_CONTRACT = {"residual": "returned", "residual_dtype": "float32", "sum": "float32",
                    "order": "multiply_in_float32"}


def forward(x, weight, eps, residual):
    return rms_norm(x, weight, eps, residual)
