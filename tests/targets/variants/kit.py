"""Correct RMSNorm variants written with torch ops, independently of the gate's emulations: a fused residual
add (the sum returned, or written in place), (1 + w), no weight, in either rounding order; and switches that
plant the bugs upstream libraries shipped, one at a time (each target module of this folder sets one).

Statistics from torch.linalg.vector_norm (another reduction than the gate's mean of squares)."""

import torch


def _acc(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def norm(s, eps):
    """s / sqrt(mean(s^2) + eps) in the accumulation dtype, and inv_rms."""
    a = s.to(_acc(s.dtype)) if s.dtype not in (torch.float32, torch.float64) else s
    n = a.shape[-1]
    inv = 1.0 / torch.sqrt(torch.linalg.vector_norm(a, dim=-1, keepdim=True).pow(2) / n + eps)
    return a * inv, inv


def forward(x, weight, eps, residual=None, *, order="multiply_in_float32", offset=0.0, sum_in="float32",
            residual_dtype=None, bug=""):
    """(y, residual_out or None). bug names one planted fault (see the modules beside this one)."""
    acc = _acc(x.dtype)
    residual_out = None
    if residual is not None:
        rdt = residual_dtype or residual.dtype
        if bug == "residual_added_twice":
            residual = residual + residual
        if sum_in == "float32":
            s = x.to(acc) + residual.to(acc)
            residual_out = s.to(rdt)
        else:
            s = (x.to(acc) + residual.to(acc)).to(rdt)
            residual_out = s
    else:
        s = x
    xh, _ = norm(s, eps)
    if weight is None:
        return xh.to(x.dtype), residual_out
    if bug == "offset_in_dtype_before_promotion":
        w = (weight + offset).to(acc)  # 1 + w rounded in the weight's dtype first
    elif bug == "offset_twice":
        w = weight.to(acc) + 2 * offset
    elif bug == "offset_dropped":
        w = weight.to(acc)
    else:
        w = weight.to(acc) + offset
    use_order = order
    if bug == "cast_dropped_with_residual" and residual is not None:
        use_order = "multiply_in_float32"  # the cast-first order lost on the fused path only
    if use_order == "cast_then_multiply":
        y = xh.to(x.dtype)
        y = (y * weight).to(x.dtype) if offset == 0.0 and weight.dtype == x.dtype else (y.to(acc) * w).to(x.dtype)
    else:
        y = (xh * w).to(x.dtype)
    return y, residual_out


class IgnoresOffsetForward(torch.autograd.Function):
    """A (1 + w) norm whose forward leaves the offset out while its backward honours it."""

    @staticmethod
    def forward(ctx, x, weight, eps, offset):
        xh, inv = norm(x, eps)
        ctx.save_for_backward(x, weight, inv)
        ctx.offset = offset
        return (xh * weight.to(xh.dtype)).to(x.dtype)  # the offset forgotten here

    @staticmethod
    def backward(ctx, gy):
        x, weight, inv = ctx.saved_tensors
        a = x.to(_acc(x.dtype))
        w = weight.to(a.dtype) + ctx.offset
        g = gy.to(a.dtype) * w
        n = a.shape[-1]
        gx = inv * (g - a * inv * inv * (g * a).sum(-1, keepdim=True) / n)
        gw = (gy.to(a.dtype) * a * inv).reshape(-1, n).sum(0)
        return gx.to(x.dtype), gw.to(weight.dtype), None, None


class PrenormGrouping(torch.autograd.Function):
    """A fused add returning (y, sum) whose backward groups the gradients as (dres + dout) * dnorm instead
    of dres + dout * dnorm."""

    @staticmethod
    def forward(ctx, x, residual, weight, eps):
        acc = _acc(x.dtype)
        s = x.to(acc) + residual.to(acc)
        xh, inv = norm(s, eps)
        ctx.save_for_backward(s, weight, inv)
        return (xh * weight.to(acc)).to(x.dtype), s.to(residual.dtype)

    @staticmethod
    def backward(ctx, gy, gres):
        s, weight, inv = ctx.saved_tensors
        n, acc = s.shape[-1], s.dtype
        g_in = gy.to(acc) + gres.to(acc)  # the wrong grouping: the sum's gradient normalised
        g = g_in * weight.to(acc)
        gs = inv * (g - s * inv * inv * (g * s).sum(-1, keepdim=True) / n)
        gw = (gy.to(acc) * s * inv).reshape(-1, n).sum(0)
        return gs.to(gy.dtype), gs.to(gres.dtype), gw.to(weight.dtype), None


class GradIntoGradY(torch.autograd.Function):
    """A (1 + w) norm whose backward writes grad_x into the memory of grad_y it was handed and returns it (an
    in-place backward, as Liger-Kernel's in_place=True: harmless alone, wrong wherever another consumer of y's
    gradient reads it after, as the residual between Gemma 2's two norms did)."""

    @staticmethod
    def forward(ctx, x, weight, eps, offset):
        xh, inv = norm(x, eps)
        ctx.save_for_backward(x, weight, inv)
        ctx.offset = offset
        return (xh * (weight.to(xh.dtype) + offset)).to(x.dtype)

    @staticmethod
    def backward(ctx, gy):
        x, weight, inv = ctx.saved_tensors
        a = x.to(_acc(x.dtype))
        w = weight.to(a.dtype) + ctx.offset
        g = gy.to(a.dtype) * w
        n = a.shape[-1]
        gx = inv * (g - a * inv * inv * (g * a).sum(-1, keepdim=True) / n)
        gw = (gy.to(a.dtype) * a * inv).reshape(-1, n).sum(0)
        gy.copy_(gx)  # grad_x written over grad_y
        return gy, gw.to(weight.dtype), None, None
