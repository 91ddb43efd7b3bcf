"""Per-element error bounds derived from rounding-error analysis (harness.judging.judge compares with them and
widens them to eager PyTorch's own error).

Model (u = unit roundoff, u_acc that of the accumulation type: float32, or float64 for
float64 input; gamma(k) = k * u_acc bounds a sum of k terms in any order):

forward   |y - y_ref| <= S * (|y_ref| * (2 u_out + d_inv + 3 u_acc) + atol)
          d_inv = (gamma(N) + 3 u_acc) / 2 + 4 u_acc + d_range      (inv_rms, relative)
backward  |dx - dx_ref| <= S * [u_out |dx| + inv |g| (d_inv + 3u + u_g) + inv |x c| (3 d_inv + 6u)
                                + inv^3 |x| (gamma(N + 2) sum|g x| + sum u_g |g x|) / N] + atol
          |dw - dw_ref| <= S * [u_w |dw| + (gamma(M) + d_inv + 3u + 2 u_in) sum_rows |dy x inv|] + atol

u_in, the input dtype's unit roundoff, allows what eager PyTorch does in 16-bit dtypes: g = dy * w
rounded to the input dtype (autograd through the weight's product; u_g, per element, is u_in where
that rounding is inexact and 0 where dy * w is exact, as with unit or power-of-two weights, so that
there a sum accumulated in a 16-bit dtype shows), and the normalised value and
its product with dy rounded to it before grad_weight's sum (each rounding also allowed half the
input dtype's subnormal spacing, absolute: float16 products of 1e-6 are subnormal). u_out and u_w are the outputs' own
last rounding; 2 u_out allows one extra rounding to the output dtype (the weight multiplied in
low precision).
d_range is the relative change that flushing fp32 subnormals can make to mean(x^2) + eps; a row
whose statistics leave the accumulation type's range (d_range > 1e-3, or sum(x^2) near its
overflow) has no single right answer at that precision and is not compared; nor, in grad_x, is
a row whose inv^3 overflows it (mean(x^2) + eps below about 2e-26 in float32). S = 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SAFETY = 2.0
UNIT_ROUNDOFF = {
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
    torch.float32: 2.0**-24,
    torch.float64: 2.0**-53,
}


def unit_roundoff(dtype: torch.dtype) -> float:
    try:
        return UNIT_ROUNDOFF[dtype]
    except KeyError:
        raise TypeError(f"no rounding model for dtype {dtype}; expected one of {list(UNIT_ROUNDOFF)}") from None


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _tiny(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).tiny


def _subnormal_half_spacing(dtype: torch.dtype) -> float:
    fi = torch.finfo(dtype)
    return fi.tiny * fi.eps / 2


@dataclass
class RowStats:
    """Float64 statistics of each row that the bounds need (shaped like x.shape[:-1])."""

    inv: torch.Tensor  # exact inv_rms
    d_inv: torch.Tensor  # relative error bound of a computed inv_rms
    verifiable: torch.Tensor  # bool: row statistics inside the accumulation type's range
    finite: torch.Tensor  # bool: row inputs all finite
    grad_verifiable: torch.Tensor  # bool: verifiable, and inv_rms^3 (in grad_x's formula) in range too


def row_stats(x: torch.Tensor, eps: float) -> RowStats:
    acc = acc_dtype(x.dtype)
    ua = unit_roundoff(acc)
    n = x.shape[-1]
    x64 = x.to(torch.float64)
    sq = x64 * x64
    ss = sq.sum(dim=-1)
    ms_eps = ss / n + eps
    inv = torch.rsqrt(ms_eps)
    d_range = _tiny(acc) / ms_eps
    d_inv = 0.5 * ((n + 3) * ua + d_range) + 4 * ua
    finite = torch.isfinite(x64).all(dim=-1)
    fmax = torch.finfo(acc).max
    verifiable = finite & (d_range <= 1e-3) & (ss <= fmax / 4) & torch.isfinite(inv)
    # grad_x = inv * g - x * inv^3 * sum(g x) / N: where inv^3 overflows the accumulation type
    # (mean(x^2) + eps below about 2e-26 in float32, 8e-206 in float64: zero rows and a tiny
    # eps), autograd's rsqrt backward and the textbook formula give inf or inf * 0 = NaN
    # while the exact gradient is finite; that answer depends on the order of operations.
    grad_verifiable = verifiable & (ms_eps >= (fmax / 4) ** (-2.0 / 3.0))
    if acc == torch.float64:  # the float64 reference rounds as much as the target
        d_inv = d_inv * 2
    return RowStats(inv=inv, d_inv=d_inv, verifiable=verifiable, finite=finite, grad_verifiable=grad_verifiable)


def forward_bounds(x, weight, eps, stats: RowStats, y_dtype):
    """Per-element bound on |y - y_ref| and on |inv_rms - inv_ref| (float64 tensors)."""
    acc = acc_dtype(x.dtype)
    ua = unit_roundoff(acc)
    uo = unit_roundoff(y_dtype)
    w = weight.to(torch.float64)
    y_ref = x.to(torch.float64) * stats.inv.unsqueeze(-1) * w
    rel = 2 * uo + stats.d_inv.unsqueeze(-1) + 3 * ua
    # Absolute terms: fp32 flush-to-zero of x * inv; the final rounding and (double rounding)
    # a normalised value rounded to the output dtype before the weight, in its subnormal range.
    atol = 2 * _tiny(acc) * (stats.inv.unsqueeze(-1) * w.abs() + 1) + _subnormal_half_spacing(y_dtype) * (1 + w.abs())
    bound_y = SAFETY * (rel * y_ref.abs() + atol)
    bound_inv = SAFETY * stats.d_inv * stats.inv
    return bound_y, bound_inv


def backward_bounds(grad_out, x, weight, stats: RowStats, d_inv_used, gx_ref, gw_ref, gw_dtype):
    """Per-element bounds on |grad_x - ref| and |grad_weight - ref| (float64 tensors).

    d_inv_used: relative error of the inv_rms handed to the target's backward, per row.
    """
    acc = acc_dtype(x.dtype)
    ua = unit_roundoff(acc)
    uo = unit_roundoff(x.dtype)
    n = x.shape[-1]
    x64 = x.to(torch.float64)
    dy = grad_out.to(torch.float64)
    w = weight.to(torch.float64)
    inv = stats.inv.unsqueeze(-1)
    d = torch.maximum(d_inv_used, stats.d_inv).unsqueeze(-1)
    g = dy * w
    # Eager PyTorch rounds g to the input dtype; where that product is exact (unit or power-of-two
    # weights), the rounding costs nothing and the bound keeps only the accumulation's error.
    # (In float64 the product itself already rounds: no element is taken as exact there.)
    exact = g.to(x.dtype).to(torch.float64) == g if x.dtype != torch.float64 else torch.zeros_like(g, dtype=torch.bool)
    u_g = torch.where(exact, 0.0, uo)
    xhat = x64 * inv  # O(1): keeps every product below in range (inv^3 alone can underflow)
    gx = g * xhat
    gxh = gx.abs()
    gxh_abs = gxh.sum(dim=-1, keepdim=True)
    gxh_rounded = (gxh * u_g).sum(dim=-1, keepdim=True)
    c = gx.sum(dim=-1, keepdim=True) / n
    g_abs, xhat_abs = g.abs(), xhat.abs()
    term = (
        uo * gx_ref.abs()
        + inv * g_abs * (d + 3 * ua + u_g)
        + inv * (xhat * c).abs() * (3 * d + 6 * ua)
        + inv * xhat_abs * ((n + 2) * ua * gxh_abs + gxh_rounded) / n
    )
    # g rounded to the input dtype may land in its subnormal range: half a spacing there, absolute.
    h_in = _subnormal_half_spacing(x.dtype)
    atol_x = 4 * _tiny(acc) * (inv * (g_abs + 1)) + h_in + SAFETY * inv * h_in * (1 + xhat_abs)
    bound_x = SAFETY * term + atol_x
    rows = x64.reshape(-1, n)
    m = rows.shape[0]
    ok = stats.verifiable.reshape(-1, 1)
    contrib = (dy.reshape(-1, n) * rows * stats.inv.reshape(-1, 1)).abs()
    contrib_sum = torch.where(ok, contrib, torch.zeros_like(contrib)).sum(dim=0)
    d_rows = d.reshape(-1)[stats.verifiable.reshape(-1)]
    dmax = float(d_rows.max()) if d_rows.numel() else 0.0
    # Each row's grad_out * x * inv_rms in the accumulation type: grad_out * x first (the textbook
    # order) can fall below its normal range and lose up to its smallest normal before inv_rms
    # scales it up (tiny x, grad_out like y and a tiny eps: a correct float32 kernel got 0 for
    # -3.5e-33); x * inv_rms first loses at most that much absolutely.
    underflow = 2 * _tiny(acc) * torch.where(ok.reshape(-1), stats.inv.reshape(-1).clamp_min(1.0),
                                             torch.zeros_like(stats.inv.reshape(-1))).sum()
    bound_w = SAFETY * (
        unit_roundoff(gw_dtype) * gw_ref.abs() + ((m + 3) * ua + dmax + 2 * uo) * contrib_sum + underflow
    ) + 4 * _tiny(acc) + _subnormal_half_spacing(gw_dtype) + SAFETY * 2 * m * _subnormal_half_spacing(x.dtype)
    return bound_x, bound_w
