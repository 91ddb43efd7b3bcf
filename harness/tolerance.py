"""Per-element error bounds derived from rounding-error analysis, and the comparison that uses them.

Model (u = unit roundoff, u_acc that of the accumulation type: float32, or float64 for
float64 input; gamma(k) = k * u_acc bounds a sum of k terms in any order):

forward   |y - y_ref| <= S * (|y_ref| * (2 u_out + d_inv + 3 u_acc) + atol)
          d_inv = (gamma(N) + 3 u_acc) / 2 + 4 u_acc + d_range      (inv_rms, relative)
backward  |dx - dx_ref| <= S * [u_out |dx| + inv |g| (d_inv + 3u) + inv |x c| (3 d_inv + 6u)
                                + inv^3 |x| gamma(N + 2) sum|g x| / N] + atol
          |dw - dw_ref| <= S * [u_w |dw| + (gamma(M) + d_inv + 3u) sum_rows |dy x inv|] + atol

2 u_out allows one extra rounding to the output dtype (the weight multiplied in low precision).
d_range is the relative change that flushing fp32 subnormals can make to mean(x^2) + eps; a row
whose statistics leave the accumulation type's range (d_range > 1e-3, or sum(x^2) near its
overflow) has no single right answer at that precision and is not compared. S = 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    if acc == torch.float64:  # the float64 reference rounds as much as the target
        d_inv = d_inv * 2
    return RowStats(inv=inv, d_inv=d_inv, verifiable=verifiable, finite=finite)


@dataclass
class Mismatch:
    """What a comparison found: empty when everything matched."""

    name: str
    messages: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.messages)

    def __str__(self) -> str:
        return "\n".join(self.messages)


def compare(
    name: str,
    got: torch.Tensor,
    ref: torch.Tensor,
    bound: torch.Tensor,
    *,
    check: torch.Tensor | None = None,
    strict_nonfinite: bool = True,
    index_names: tuple[str, ...] = ("row", "col"),
) -> Mismatch:
    """Compare got with ref element by element under bound (all float64, same shape).

    check: bool mask of the elements to compare (others are skipped). Where ref is NaN, got must
    be NaN; where ref is +-inf, got must be the same inf (strict_nonfinite) or any non-finite
    value; where ref is finite, got must be finite and within bound.
    """
    out = Mismatch(name)
    if tuple(got.shape) != tuple(ref.shape):
        out.messages.append(f"{name}: expected shape {tuple(ref.shape)}, but got {tuple(got.shape)}")
        return out
    if got.numel() == 0:
        return out
    g = got.detach().to(torch.float64)
    r = ref.to(torch.float64)
    if check is None:
        check = torch.ones_like(r, dtype=torch.bool)
    ref_finite = torch.isfinite(r)
    err = (g - r).abs()
    # A true value within its bound of the output dtype's largest finite value may round to inf.
    fmax = torch.finfo(got.dtype).max if got.dtype.is_floating_point else float("inf")
    overflowed = torch.isinf(g) & (torch.sign(g) == torch.sign(r)) & (r.abs() + bound >= fmax)
    bad_finite = check & ref_finite & ~(err <= bound) & ~overflowed  # NaN err counts as bad
    if strict_nonfinite:
        bad_nan = check & torch.isnan(r) & ~torch.isnan(g)
        bad_inf = check & torch.isinf(r) & ~(g == r)
    else:
        bad_nan = check & ~ref_finite & torch.isfinite(g)
        bad_inf = torch.zeros_like(bad_nan)
    bad = bad_finite | bad_nan | bad_inf
    nbad = int(bad.sum())
    if nbad == 0:
        return out
    ratio = torch.where(bad_finite, err / bound.clamp_min(1e-300), torch.zeros_like(err))
    ratio = torch.where(bad & ~bad_finite, torch.full_like(err, float("inf")), ratio)
    ratio = torch.nan_to_num(ratio, nan=float("inf"))
    flat = int(torch.argmax(ratio.reshape(-1)))
    idx = _unravel(flat, tuple(r.shape))
    where = ", ".join(f"{n}={i}" for n, i in zip(_names(index_names, len(idx)), idx))
    e, gv, rv, bv = (float(t.reshape(-1)[flat]) for t in (err, g, r, bound))
    rows_bad = _rows_with(bad)
    out.messages.append(
        f"{name}: {nbad} of {int(check.sum())} compared elements wrong"
        + (f" in {rows_bad} row(s)" if rows_bad is not None else "")
        + f"; worst at [{where}]: expected {rv:.9g}, got {gv:.9g}, |error| {e:.3g} vs bound {bv:.3g}"
    )
    kinds = []
    if int(bad_nan.sum()):
        kinds.append(f"{int(bad_nan.sum())} where the reference is NaN")
    if int(bad_inf.sum()):
        kinds.append(f"{int(bad_inf.sum())} where the reference is +-inf")
    nonfin = int((bad_finite & ~torch.isfinite(g)).sum())
    if nonfin:
        kinds.append(f"{nonfin} non-finite where the reference is finite (unwritten or overflowed?)")
    if kinds:
        out.messages.append(f"{name}: of those, " + "; ".join(kinds))
    return out


def _names(index_names, k):
    if k == len(index_names):
        return index_names
    if k == 1:
        return (index_names[-1],)
    return tuple(f"d{i}" for i in range(k - 1)) + (index_names[-1],)


def _rows_with(bad: torch.Tensor):
    if bad.dim() < 2:
        return None
    return int(bad.reshape(-1, bad.shape[-1]).any(dim=-1).sum())


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    idx = []
    for s in reversed(shape):
        idx.append(flat % s)
        flat //= s
    return tuple(reversed(idx))


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
    xhat = x64 * inv  # O(1): keeps every product below in range (inv^3 alone can underflow)
    gxh_abs = (g * xhat).abs().sum(dim=-1, keepdim=True)
    c = (g * xhat).sum(dim=-1, keepdim=True) / n
    term = (
        uo * gx_ref.abs()
        + inv * g.abs() * (d + 3 * ua)
        + inv * (xhat * c).abs() * (3 * d + 6 * ua)
        + inv * xhat.abs() * (n + 2) * ua * gxh_abs / n
    )
    atol_x = 4 * _tiny(acc) * (inv * (g.abs() + 1)) + _subnormal_half_spacing(x.dtype)
    bound_x = SAFETY * term + atol_x
    rows = x64.reshape(-1, n)
    m = rows.shape[0]
    ok = stats.verifiable.reshape(-1, 1)
    contrib = (dy.reshape(-1, n) * rows * stats.inv.reshape(-1, 1)).abs()
    contrib_sum = torch.where(ok, contrib, torch.zeros_like(contrib)).sum(dim=0)
    d_rows = d.reshape(-1)[stats.verifiable.reshape(-1)]
    dmax = float(d_rows.max()) if d_rows.numel() else 0.0
    bound_w = SAFETY * (
        unit_roundoff(gw_dtype) * gw_ref.abs() + ((m + 3) * ua + dmax) * contrib_sum
    ) + 4 * _tiny(acc) + _subnormal_half_spacing(gw_dtype)
    return bound_x, bound_w
