"""harness.ops: RMSNorm is a drop-in for torch.nn.RMSNorm; rms_norm is differentiable."""

import pytest
import torch

from harness.ops import RMSNorm, rms_norm


@pytest.mark.parametrize("shape,normalized,eps,affine,dtype", [
    ((4, 33), 33, None, True, torch.float32),
    ((2, 3, 8, 5), (8, 5), 1e-5, True, torch.float64),
    ((5, 64), [64], 1e-6, False, torch.float32),
    ((3, 4097), 4097, None, True, torch.bfloat16),
])
def test_rmsnorm_matches_torch_nn_rmsnorm(shape, normalized, eps, affine, dtype):
    torch.manual_seed(0)
    ours = RMSNorm(normalized, eps=eps, elementwise_affine=affine, dtype=dtype)
    ref = torch.nn.RMSNorm(normalized, eps=eps, elementwise_affine=affine, dtype=dtype)
    if affine:
        with torch.no_grad():
            w = torch.randn_like(ours.weight, dtype=torch.float32).to(dtype)
            ours.weight.copy_(w)
            ref.weight.copy_(w)
    x = torch.randn(shape, dtype=torch.float32).to(dtype)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = ours(xa), ref(xb)
    tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 2e-2}[dtype]
    torch.testing.assert_close(ya, yb, rtol=tol, atol=tol)
    g = torch.randn_like(ya)
    ya.backward(g)
    yb.backward(g)
    torch.testing.assert_close(xa.grad, xb.grad, rtol=tol * 4, atol=tol * 4)
    if affine:
        torch.testing.assert_close(ours.weight.grad, ref.weight.grad, rtol=tol * 4, atol=tol * 4 * shape[0])


def test_rms_norm_is_differentiable_in_both_outputs():
    x = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    w = torch.randn(7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rms_norm(a, b, 1e-3), (x, w))
    assert torch.autograd.gradcheck(lambda a, b: torch.ops.rmsnorm.forward(a, b, 1e-3), (x, w))


def test_rmsnorm_rejects_a_wrong_trailing_shape():
    with pytest.raises(ValueError, match=r"expected input with trailing shape \[8\], but got \[2, 9\]"):
        RMSNorm(8)(torch.randn(2, 9))
