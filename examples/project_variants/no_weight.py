"""rms_norm(x, None, eps): no weight (torch.nn.RMSNorm(elementwise_affine=False), the QK-norms), y = x * inv_rms
rounded once."""

from rmsnorm import rms_norm

RMSNORM_CONTRACT = {"weight": False, "order": "multiply_in_float32"}


def forward(x, weight, eps):
    return rms_norm(x, None, eps)
