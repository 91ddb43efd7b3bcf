"""Judging a target's outputs: the bound each element is held to, the comparison, and the
diagnosis of a failure.

The bound of each element is the larger of two (harness.judging.tolerance has the first):
  analysis  a rounding-error bound for a careful implementation that keeps its statistics in
            float32 (float64 for float64 input) and rounds intermediates to the input dtype
            where eager PyTorch does;
  eager     EAGER_K times how far eager PyTorch in the input's dtype lands from float64
            (reference.eager_ref: Hugging Face's LlamaRMSNorm and its autograd backward), the
            rule flash-attention's tests use with k = 2. It is taken per row (per tensor for
            grad_weight) as a multiple of the analysis bound, so a row where eager PyTorch
            loses accuracy (an intermediate that underflows, a sum that cancels) allows every
            element of that row the same multiple, and an element where eager PyTorch happens
            to be exact does not tighten the bound below the analysis.
So anything at least as accurate as eager PyTorch in the input's dtype passes, and the analysis
still catches what it caught.

Non-finite rows (an input row holding inf or NaN): the statistic has no finite value, and
implementations save it as 0 (rsqrt(inf)) or NaN. Either is accepted for inv_rms; y and the
gradients must be NaN or inf wherever the float64 reference is, and where the reference is
finite they may be NaN (what a NaN inv_rms gives) or within bound of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from harness.judging import tolerance as tol
from harness.judging.reference import backward_ref, eager_ref, forward_ref

EAGER_K = 2.0
POISON_NAN, POISON_FINITE = 0x7FFA, 0x42  # the poisons of harness.judging.laws.common, checked bit for bit


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
    nan_ok: torch.Tensor | None = None,
    index_names: tuple[str, ...] = ("row", "col"),
    alternatives: tuple[tuple[str, torch.Tensor], ...] = (),
    input_dtype: torch.dtype | None = None,
    analysis: torch.Tensor | None = None,
    nonfinite_rows: torch.Tensor | None = None,
    row_span: "RowSpan | None" = None,
) -> Mismatch:
    """Compare got with ref element by element under bound (ref and bound float64, same shape).

    check: bool mask of the elements to compare (others are skipped). Where ref is NaN, got must
    be NaN; where ref is +-inf, got must be the same inf (strict_nonfinite) or any non-finite
    value; where ref is finite, got must be finite and within bound, or NaN where nan_ok.
    alternatives: (description, what got would be under that explanation) pairs tried on a
    failure, for the diagnosis. input_dtype: the dtype the target was given (default got's);
    errors the size of a dtype narrower than it are diagnosed as computed at that precision.
    analysis: the rounding analysis' own bound, when `bound` was widened to eager PyTorch's error:
    a failure says where the worst element's bound came from. nonfinite_rows: the rows (leading dims)
    whose input holds inf or NaN, so that a NaN that spread from one of them into another row is told.
    row_span: the vectors a statistic that is off moves each row of got by, in combination, one set of factors
    per row (RowSpan): a failure whose error is such a combination is named so, not as a narrower dtype's
    rounding.
    """
    out = Mismatch(name)
    if tuple(got.shape) != tuple(ref.shape):
        out.messages.append(f"{name}: expected shape {list(ref.shape)}, but got {list(got.shape)}")
        return out
    if got.numel() == 0:
        return out
    g = got.detach().to(torch.float64)
    r = ref.to(torch.float64)
    if check is None:
        check = torch.ones_like(r, dtype=torch.bool)
    ref_finite = torch.isfinite(r)
    err = (g - r).abs()
    outside = ~(err <= bound)  # NaN err counts as outside
    if bool(outside.any()):
        # A true value within its bound of the output dtype's largest finite value may round to inf.
        fmax = torch.finfo(got.dtype).max if got.dtype.is_floating_point else float("inf")
        overflowed = torch.isinf(g) & (torch.sign(g) == torch.sign(r)) & (r.abs() + bound >= fmax)
        allowed_nan = torch.isnan(g) & nan_ok if nan_ok is not None else torch.zeros_like(check)
        bad_finite = check & ref_finite & outside & ~overflowed & ~allowed_nan
    else:  # every element within its bound (a passing target's usual case): the same, in fewer passes
        bad_finite = torch.zeros(r.shape, dtype=torch.bool, device=r.device)
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
    digits = 17 if got.dtype == torch.float64 else 9  # enough to tell the two apart in got's dtype
    out.messages.append(
        f"{name}: {nbad} of {int(check.sum())} compared elements wrong"
        + (f" in {rows_bad} row(s)" if rows_bad is not None else "")
        + (f"; worst at [{where}]" if where else "; the element")
        + f": expected {rv:.{digits}g}, got {gv:.{digits}g}, |error| {e:.3g} vs bound {bv:.3g}"
        + _bound_origin(analysis, flat, bv)
    )
    kinds = []
    if int(bad_nan.sum()):
        kinds.append(f"{int(bad_nan.sum())} where the reference is NaN")
    if int(bad_inf.sum()):
        kinds.append(f"{int(bad_inf.sum())} where the reference is +-inf")
    nonfin = int((bad_finite & ~torch.isfinite(g)).sum())
    if nonfin:
        kinds.append(f"{nonfin} non-finite where the reference is finite")
    if kinds:
        out.messages.append(f"{name}: of those, " + "; ".join(kinds))
    out.messages += [f"{name}: diagnosis: {d}" for d in diagnose(got, r, bound, bad, check & ref_finite, alternatives,
                                                                      input_dtype or got.dtype, nonfinite_rows,
                                                                      row_span)]
    return out


def _bound_origin(analysis: torch.Tensor | None, flat: int, bound: float) -> str:
    """Where the worst element's bound came from, when eager PyTorch's error widened it."""
    if analysis is None or analysis.numel() == 0:
        return ""
    a = float(analysis.reshape(-1)[flat])
    if not math.isfinite(a) or bound <= a * 1.0001:
        return ""
    return (f" (bound widened to {EAGER_K:g}x eager PyTorch's error here: eager PyTorch is itself off on this "
            f"{'row' if analysis.dim() > 1 else 'tensor'}; the rounding analysis alone allows {a:.3g})")


# -- diagnosis ---------------------------------------------------------------------------------

_NARROWER = {
    torch.float64: (torch.float32, torch.bfloat16, torch.float16),
    torch.float32: (torch.bfloat16, torch.float16),
}


# Whether the output memory of the call being judged was filled with the finite poison (harness.judging.laws.
# common.poison says so, and each law starts without it). Its bytes 0x42 are an ordinary number (48.5 in
# bfloat16, 3.13 in float16, 48.6 in float32), which a wrong computation can give: an element holding them
# was never written only where that memory held them before the call. The NaN poison's payload no arithmetic
# makes, so it is read whichever fill was used.
_FINITE_FILL = {"on": False}


def finite_poison_filled(on: bool) -> None:
    _FINITE_FILL["on"] = on


def _poisoned(got: torch.Tensor) -> torch.Tensor:
    """Elements that hold a poison bit for bit (harness.judging.laws.common): memory nothing wrote. The finite
    poison counts only after a finite fill (finite_poison_filled)."""
    t = got.detach()
    if not t.dtype.is_floating_point or t.numel() == 0 or t.element_size() < 2:
        return torch.zeros(t.shape, dtype=torch.bool, device=t.device)
    units = t.reshape(-1).contiguous().view(torch.int16).reshape(*t.shape, t.element_size() // 2)  # 0-dim too
    nan = (units == POISON_NAN).all(dim=-1)
    if not _FINITE_FILL["on"]:
        return nan
    b = t.reshape(-1).contiguous().view(torch.uint8).reshape(*t.shape, t.element_size())
    return nan | (b == POISON_FINITE).all(dim=-1)


def diagnose(got, ref, bound, bad, finite_checked, alternatives=(), input_dtype=None, nonfinite_rows=None,
             row_span=None) -> list[str]:
    """Explanations of a failure, each checked against the numbers (at most one per kind)."""
    out = []
    bad_c = bad.cpu()
    nbad = int(bad_c.sum())
    poison = _poisoned(got).cpu() & bad_c
    if int(poison.sum()):
        out.append(f"{int(poison.sum())} of the {nbad} wrong elements still hold the poison the output memory was "
                   "filled with before the call, bit for bit: never written")
    g = got.detach().to(torch.float64).cpu()
    r, bnd = ref.cpu(), bound.cpu()

    def matches(alt, where):
        a = alt.detach().to(torch.float64).cpu()
        same_nonfinite = ((g == a) | (torch.isnan(g) & torch.isnan(a))) & ~torch.isfinite(a)
        return (_explains(g, a, r, bnd) | same_nonfinite) & where

    explained = next((desc for desc, alt in alternatives
                      if tuple(alt.shape) == tuple(g.shape) and int(matches(alt, bad_c).sum()) >= max(1, 0.9 * nbad)),
                     None)
    # A NaN that an alternative reproduces (a strided weight's gaps read) did not spread from another row.
    spread = None if explained else _spread(got, ref, bad_c & ~poison, nonfinite_rows)
    if spread:
        out.append(spread)
    if explained:
        out.append(explained)
    shifted = _neighbour(g, r, bnd, bad_c)
    if shifted:
        out.append(shifted)
    scaled = _row_scaled(g, r, bnd, bad_c)
    if scaled:
        out.append(scaled)  # errors proportional to the values are not a narrower dtype's rounding
        return out
    spanned = _in_row_span(g, r, bnd, bad_c, row_span) if row_span else None
    if spanned:
        out.append(spanned)  # nor are errors that a few factors per row account for
        return out
    precision = _narrower_precision(input_dtype or got.dtype, g, r, finite_checked.cpu() & torch.isfinite(g), bad_c)
    if precision:
        out.append(precision)
    return out


def _spread(got, ref, bad, nonfinite_rows) -> str | None:
    """Wrong elements that are inf or NaN where the reference is finite, in rows whose input is finite, while
    other rows' inputs hold inf or NaN: a non-finite value of another row spread into them."""
    if nonfinite_rows is None or got.dim() == 0 or not bool(nonfinite_rows.any()):
        return None
    g = got.detach().cpu()
    rows_bad = nonfinite_rows.cpu().reshape(-1)
    hit = (bad & ~torch.isfinite(g.to(torch.float64)) & torch.isfinite(ref.cpu())).reshape(-1, g.shape[-1])
    hit &= ~rows_bad.unsqueeze(-1)
    if not bool(hit.any()):
        return None
    return (f"{int(hit.sum())} wrong elements are inf or NaN in {int(hit.any(-1).sum())} row(s) whose input is finite, "
            f"while {int(rows_bad.sum())} other row(s) hold inf or NaN: a non-finite input of another row spread into "
            "them (rows are not independent: a statistic shared across rows?)")


EXPLAINS = 0.25  # an explanation leaves at most this share of each wrong element's error unexplained


def _explains(g, alt, r, bnd):
    """Where alt explains got: within the bound of alt, and much closer to it than to the
    reference. Within the bound alone is no evidence where the bound is wide (a grad_weight over
    65,535 rows had a bound of 553, and almost any story matched)."""
    d = (g - alt).abs()
    return (d <= bnd) & (d <= EXPLAINS * (g - r).abs())


def _row_scaled(g, r, bnd, bad) -> str | None:
    """Every wrong row is the reference times one factor of its own: the row's statistic is off
    (elements left out of the sum of squares, eps misapplied), not its rounding."""
    if g.dim() == 0 or not bool(bad.any()):
        return None
    g2, r2, b2, bad2 = (t.reshape(-1, t.shape[-1]) for t in (g, r, bnd, bad))
    rows = bad2.any(-1).nonzero().flatten().tolist()
    factors = []
    for i in rows[:64]:
        ok = torch.isfinite(g2[i]) & torch.isfinite(r2[i]) & (r2[i].abs() > 0)
        if int(ok.sum()) < 2:
            return None
        f = float((g2[i][ok] / r2[i][ok]).median())
        wrong = ok & bad2[i]
        if not bool(wrong.any()) or bool((bad2[i] & ~ok).any()):
            return None  # a wrong inf or NaN is no multiple of the reference: no factor tells of it
        if (not math.isfinite(f) or not bool(((g2[i] - f * r2[i]).abs() <= b2[i])[ok].all())
                or not bool(_explains(g2[i], f * r2[i], r2[i], b2[i])[wrong].all())):
            return None
        factors.append((i, f))
    if not factors:
        return None
    i, f = factors[0]
    if all(f_ == 0 for _, f_ in factors):
        return (f"each wrong row is 0 where the reference is not ({len(factors)} row(s); row {i} first): the row was "
                "never computed, or its result was never stored (rows left out of the launch or the loop?)")
    shown = f"{f:.{17 if abs(f - 1) < 1e-6 else 7}g}"  # a factor within 1e-6 of 1 shown as more than "1"
    return (f"each wrong row is the reference times one factor of its own ({len(factors)} row(s); row {i}: "
            f"{shown}): the row's statistic is off (elements left out of the sum of squares, eps misapplied), "
            "not its rounding")


SPAN_MIN_SPARE = 4  # a row fits k factors with at least this many elements to spare, or the fit is no evidence


@dataclass(frozen=True)
class RowSpan:
    """What a statistic that is off does to an output: moves each row by a combination of vectors."""

    diagnosis: str  # what such a failure is; "{rows}": how many rows are wrong, "{factors}": how many vectors
    vectors: Callable[[], tuple]  # the vectors, each of the output's shape (made only on a failure)
    read: Callable | None = None  # what one wrong row's factors say, where they say more than the diagnosis


def _in_row_span(g, r, bnd, bad, row_span) -> str | None:
    """Every wrong row's error is a combination of the row's span vectors, with factors of its own: a row
    statistic that is off (the forward's _row_scaled with more than one term). Rounding noise fits no such
    combination: over more elements than factors, least squares leaves most of it."""
    if g.dim() == 0 or not bool(bad.any()):
        return None
    vectors = row_span.vectors()
    k = len(vectors)
    if k == 0 or g.shape[-1] < k + SPAN_MIN_SPARE:
        return None  # no vectors: no rows (grad_weight of zero rows), and nothing to combine
    g2, r2, b2, bad2 = (t.reshape(-1, t.shape[-1]) for t in (g, r, bnd, bad))
    basis = torch.stack([v.detach().to(torch.float64).cpu().reshape(g2.shape) for v in vectors], dim=-1)
    rows = bad2.any(-1).nonzero().flatten().tolist()
    coefs = []
    for i in rows[:64]:
        a, ok = basis[i], torch.isfinite(g2[i]) & torch.isfinite(r2[i])
        ok &= torch.isfinite(a).all(-1)
        if bool((bad2[i] & ~ok).any()) or int(ok.sum()) < k + SPAN_MIN_SPARE:
            return None  # a wrong inf or NaN is no combination of finite vectors
        err = (g2[i] - r2[i])[ok]
        coef = torch.linalg.lstsq(a[ok], err.unsqueeze(-1)).solution
        fit = r2[i][ok] + (a[ok] @ coef).squeeze(-1)
        if not bool(torch.isfinite(coef).all()) or not bool(((g2[i][ok] - fit).abs() <= b2[i][ok]).all()):
            return None
        if not bool(_explains(g2[i][ok], fit, r2[i][ok], b2[i][ok])[bad2[i][ok]].all()):
            return None
        coefs.append(coef.flatten())
    told = row_span.read(coefs[0]) if row_span.read and len(rows) == 1 else None
    return told or row_span.diagnosis.format(rows=len(rows), factors=k)


def _neighbour(g, r, bnd, bad) -> str | None:
    """The wrong values are the reference's values one row or one column away."""
    if g.dim() == 0:
        return None
    nbad = int(bad.sum())
    g2, r2, b2, bad2 = (t.reshape(-1, t.shape[-1]) if t.dim() > 1 else t.reshape(1, -1) for t in (g, r, bnd, bad))
    for dim, label in ((1, "column"), (0, "row")):
        if g2.shape[dim] < 2:
            continue
        for step in (1, -1):
            rs = torch.roll(r2, shifts=-step, dims=dim)  # rs[i] = r[i + step]
            valid = torch.ones_like(bad2)
            if dim == 1:
                valid[:, -1 if step == 1 else 0] = False
            else:
                valid[-1 if step == 1 else 0, :] = False
            # A neighbour's value within the bound of 0 explains nothing: a 0 (a row of one element's grad_x)
            # matches every other 0.
            hit = _explains(g2, rs, r2, b2) & torch.isfinite(rs) & (rs.abs() > b2) & bad2 & valid
            if int(hit.sum()) >= max(1, 0.9 * nbad):
                side = "next" if step == 1 else "previous"
                return (f"the wrong values are the reference's values of the {side} {label} "
                        f"({int(hit.sum())} of {nbad}): an index off by one {label}?")
    return None


PRECISION_MIN_WRONG = 8  # fewer wrong elements than this cannot show a rounding's spread


def _narrower_precision(dtype, g, r, finite, bad) -> str | None:
    """The errors are the size of a narrower dtype's rounding: computed in that dtype."""
    if dtype not in _NARROWER or not bool((bad & finite).any()):
        return None
    r2 = r.reshape(-1, r.shape[-1]) if r.dim() > 1 else r.reshape(1, -1)
    scale = r2.abs().where(torch.isfinite(r2), torch.zeros_like(r2)).amax(dim=-1, keepdim=True).expand_as(r2)
    scale = scale.reshape(r.shape)
    ok = finite & (scale > 0)
    if not bool(ok.any()):
        return None
    # Rounding is evidence only in numbers: enough wrong elements, with errors of both signs (a
    # rounding error is as often up as down; a statistic that is off moves a row one way).
    err = (g - r)[ok & bad]
    if err.numel() < PRECISION_MIN_WRONG or min(int((err > 0).sum()), int((err < 0).sum())) < 0.1 * err.numel():
        return None
    rel = ((g - r).abs() / scale.clamp_min(1e-300))[ok]
    worst = float(rel.max())
    if worst == 0 or not math.isfinite(worst):
        return None
    best = min(_NARROWER[dtype], key=lambda d: abs(math.log(worst / tol.unit_roundoff(d))))
    units = worst / tol.unit_roundoff(best)
    if not 1 / 32 <= units <= 16:
        return None
    name = str(dtype).replace("torch.", "")
    return (f"the errors are the size of {str(best).replace('torch.', '')} rounding (worst {units:.2g} units of "
            f"its rounding, relative to each row's largest value): the {name} input appears to be computed at "
            f"{str(best).replace('torch.', '')} precision")


def _names(index_names, k):
    if k == 0:
        return ()
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


# -- expectations: references and bounds -------------------------------------------------------


def _eager_widened(bound: torch.Tensor, eager: torch.Tensor | None, ref: torch.Tensor, check: torch.Tensor,
                   rowwise: bool) -> torch.Tensor:
    """bound * (1 + EAGER_K * R), R the largest |eager - ref| / bound of the row (rowwise) or of
    the tensor: at least the analysis bound and at least EAGER_K * |eager - ref| + the
    analysis' absolute term, for every element."""
    if eager is None or bound.numel() == 0:
        return bound
    e = (eager.detach().to(torch.float64) - ref).abs()
    use = check & torch.isfinite(e)  # e finite: ref (and eager) finite too
    ratio = torch.where(use, e / bound.clamp_min(1e-300), 0.0)
    if rowwise and bound.dim() >= 1:
        flat = ratio.reshape(-1, ratio.shape[-1]) if ratio.dim() > 1 else ratio.reshape(1, -1)
        r = flat.amax(dim=-1, keepdim=True).expand_as(flat).reshape(bound.shape)
    else:
        r = ratio.max()
    return bound * (1 + EAGER_K * r)


def _strides_ignored(x: torch.Tensor) -> torch.Tensor | None:
    """x read in storage order as if it were contiguous (its strides ignored), or None when
    that is x itself or would read outside its storage."""
    if x.is_contiguous() or x.numel() == 0:
        return None
    need = x.storage_offset() + x.numel()
    if need * x.element_size() > x.untyped_storage().nbytes():
        return None
    return torch.as_strided(x, x.shape, torch.empty(x.shape, device="meta").stride(), x.storage_offset())


@dataclass
class Forward:
    """What a forward on (x, weight, eps) must give, and how far it may be off."""

    y_ref: torch.Tensor
    inv_ref: torch.Tensor
    bound_y: torch.Tensor
    bound_inv: torch.Tensor
    stats: tol.RowStats
    rows_ok: torch.Tensor  # rows compared: statistics in range, or non-finite input
    nonfinite: torch.Tensor  # rows holding inf or NaN
    analysis_y: torch.Tensor | None = None  # bound_y before eager PyTorch's error widened it

    @property
    def unverified_rows(self) -> int:
        return int((~self.rows_ok).sum())


def expect_forward(x, weight, eps, *, eager: bool = True) -> Forward:
    stats = tol.row_stats(x, eps)
    y_ref, inv_ref = forward_ref(x, weight, eps)
    bound_y, bound_inv = tol.forward_bounds(x, weight, eps, stats, x.dtype)
    rows_ok = stats.verifiable | ~stats.finite
    analysis_y = bound_y
    if eager:
        y_e, _, _ = eager_ref(x, weight, eps)
        bound_y = _eager_widened(bound_y, y_e, y_ref, row_mask(stats.verifiable, x.shape), rowwise=True)
    return Forward(y_ref, inv_ref, bound_y, bound_inv, stats, rows_ok, ~stats.finite, analysis_y)


def worst_units(out, ref, check, dtype, scale=None) -> float | None:
    """The largest |out - ref| over the elements compared (check), in units of the dtype's
    rounding (2^-24 float32, 2^-11 float16, 2^-8 bfloat16, 2^-53 float64) of each row's scale
    (default: the row's largest |ref|; at least the dtype's smallest normal number): how accurate a
    target is, the measure the property sheet shows. None when no element is compared."""
    o = out.detach().to(torch.float64).reshape(ref.shape)
    r = ref.to(o.device)
    ok = check.to(o.device) & torch.isfinite(r) & torch.isfinite(o)
    if ref.numel() == 0 or not bool(ok.any()):
        return None
    if scale is None:
        scale = torch.where(ok, r.abs(), 0.0).amax(-1, keepdim=True)
    # Not below the dtype's smallest normal number: in the subnormal range the spacing is fixed, and
    # a row of tiny values would turn half a subnormal step into thousands of roundings.
    scale = torch.nan_to_num(scale.to(o.device), nan=0.0, posinf=0.0).clamp_min(torch.finfo(dtype).tiny)
    err = torch.where(ok, (o - r).abs() / scale, 0.0)
    return float(err.max()) / tol.unit_roundoff(dtype)


def _measured(measure: dict, name: str, units: float | None) -> None:
    if units is not None:  # nothing compared: nothing to say of the accuracy
        measure[name] = units


def judge_forward(y, inv, x, weight, eps, *, label: str = "", exp: Forward | None = None,
                  measure: dict | None = None) -> list[Mismatch]:
    """y (and inv_rms, when not None) against the float64 reference. measure: a dict that gets
    y's worst_units when y passes and was compared somewhere."""
    exp = exp or expect_forward(x, weight, eps)
    nonfinite = row_mask(exp.nonfinite, x.shape)
    alts = []
    alt_x = _strides_ignored(x)
    if alt_x is not None:
        alts.append((f"y equals the result for x read in storage order as if it were contiguous: the strides "
                     f"{list(x.stride())} of x were ignored", forward_ref(alt_x, weight, eps)[0]))
    alt_w = _strides_ignored(weight) if weight is not None else None
    if alt_w is not None:  # a strided weight's gaps hold NaN: read them and y shows it
        alts.append((f"y equals the result for the weight read in storage order as if it were contiguous: its "
                     f"stride {list(weight.stride())} was ignored", forward_ref(x, alt_w, eps)[0]))
    msgs = [compare(f"{label}y", y, exp.y_ref, exp.bound_y, check=row_mask(exp.rows_ok, x.shape),
                    nan_ok=nonfinite, alternatives=tuple(alts), input_dtype=x.dtype, analysis=exp.analysis_y,
                    nonfinite_rows=exp.nonfinite)]
    if inv is not None:
        inv_l = inv.reshape(tuple(x.shape[:-1]))
        b = exp.bound_inv + tol.unit_roundoff(inv.dtype) * exp.inv_ref.abs() * tol.SAFETY
        msgs.append(compare(f"{label}inv_rms", inv_l, exp.inv_ref, b, check=exp.stats.verifiable,
                            index_names=("row",), input_dtype=x.dtype))
        got = inv_l.detach().to(torch.float64)
        wrong = exp.nonfinite & ~(torch.isnan(got) | (got == 0))
        if bool(wrong.any()):
            k = int(wrong.reshape(-1).nonzero()[0])
            msgs.append(Mismatch(f"{label}inv_rms", [
                f"{label}inv_rms: {int(wrong.sum())} row(s) holding inf or NaN saved {float(got.reshape(-1)[k]):.9g}; "
                "expected 0 or NaN (a row with inf or NaN has no finite statistic)"]))
    if measure is not None and not msgs[0]:
        _measured(measure, "y", worst_units(y, exp.y_ref, row_mask(exp.rows_ok, x.shape), x.dtype))
    return msgs


@dataclass
class Backward:
    """What a backward must give for (grad_out, x, weight, eps) and the inv_rms it was handed."""

    gx_ref: torch.Tensor
    gw_ref: torch.Tensor
    bound_x: torch.Tensor
    bound_w: torch.Tensor
    stats: tol.RowStats
    rows_ok: torch.Tensor  # rows whose grad_x is compared
    weight_rows_ok: torch.Tensor  # rows whose statistics allow grad_weight's terms to be judged
    analysis_x: torch.Tensor | None = None  # the bounds before eager PyTorch's error widened them
    analysis_w: torch.Tensor | None = None

    @property
    def weight_comparable(self) -> bool:
        """grad_weight sums every row: compared only when every row is."""
        return bool(self.weight_rows_ok.all())

    @property
    def unverified_rows(self) -> int:
        return int((~self.rows_ok).sum())


def expect_backward(grad_out, x, weight, eps, inv=None, gw_dtype=None) -> Backward:
    """inv: the inv_rms handed to the target's backward (None: the exact one)."""
    stats = tol.row_stats(x, eps)
    gx_ref, gw_ref = backward_ref(grad_out, x, weight, eps)
    if inv is None:
        d_used = stats.d_inv
    else:
        inv_used = inv.detach().reshape(tuple(x.shape[:-1])).to(torch.float64)
        d_used = torch.nan_to_num(((inv_used - stats.inv).abs() / stats.inv), nan=0.0, posinf=0.0)
    bound_x, bound_w = tol.backward_bounds(grad_out, x, weight, stats, d_used, gx_ref, gw_ref, gw_dtype or weight.dtype)
    rows_ok = stats.grad_verifiable | ~stats.finite
    weight_rows_ok = stats.verifiable | ~stats.finite
    _, ex, ew = eager_ref(x, weight, eps, grad_out)
    analysis_x, analysis_w = bound_x, bound_w
    bound_x = _eager_widened(bound_x, ex, gx_ref, row_mask(stats.grad_verifiable, x.shape), rowwise=True)
    if bool(weight_rows_ok.all()):
        bound_w = _eager_widened(bound_w, ew, gw_ref, torch.ones_like(gw_ref, dtype=torch.bool), rowwise=False)
    return Backward(gx_ref, gw_ref, bound_x, bound_w, stats, rows_ok, weight_rows_ok, analysis_x, analysis_w)


def grad_x_span(grad_out, x, weight, x_name="x"):
    """grad_x = inv * (g - x * inv^2 * mean(x * g)), g = grad_out * weight: an inv_rms, an eps, a divisor of the
    mean or a mean term that is off moves each row by a * g + b * x, a and b the row's own."""
    def vectors():
        g = grad_out.detach().to(torch.float64)
        if weight is not None:
            g = g * weight.detach().to(torch.float64)
        return g.expand(x.shape), x.detach().to(torch.float64).expand(x.shape)
    return RowSpan(f"each wrong row's error is a combination of grad_out * weight and {x_name} with factors of the "
                   "row's own ({rows} row(s)): a statistic of the row is off (inv_rms, eps, the mean of x * grad_out "
                   "* weight or its divisor N), not its rounding", vectors)


SPAN_MAX_ROWS = 32  # grad_weight's span has a vector per row: past this many, rows are too many to fit


def grad_weight_span(grad_out, x, inv):
    """grad_weight = sum over rows of grad_out * x * inv: an inv_rms or eps that is off in some rows moves it by
    a combination of those rows' terms, one factor per row."""
    if x.dim() == 0 or x.numel() // max(1, x.shape[-1]) > SPAN_MAX_ROWS:
        return None

    def vectors():
        t = grad_out.detach().to(torch.float64) * x.detach().to(torch.float64)
        t = t * inv.detach().to(torch.float64).reshape(tuple(x.shape[:-1]) + (1,))
        return tuple(t.reshape(-1, x.shape[-1]).unbind(0))

    def left_out(coef):
        """Factors of -1 and 0 only: the rows with -1 are missing from the sum."""
        c = coef.tolist()
        gone = [i for i, v in enumerate(c) if abs(v + 1) < 1e-3]
        if not gone or any(abs(v) >= 1e-3 and abs(v + 1) >= 1e-3 for v in c):
            return None
        return (f"grad_weight is the sum over {len(c) - len(gone)} of the {len(c)} rows: the terms of row(s) "
                f"{gone[:8]} are left out of the sum over rows (a leading dimension dropped, or rows past a block "
                "never added?)")
    return RowSpan("grad_weight's error is a combination of the rows' grad_out * x * inv_rms, one factor for each "
                   "of the {factors} row(s): the statistic of some rows is off (inv_rms, eps), not the rounding",
                   vectors, left_out)


def judge_backward(gx, gw, grad_out, x, weight, eps, inv, *, label: str = "", weight_grad: bool = True,
                   measure: dict | None = None) -> tuple[list[Mismatch], int]:
    """grad_x and grad_weight against the float64 reference, given the inv_rms handed to the
    target's backward. Returns (mismatches, rows not compared). measure: a dict that gets
    grad_x's worst_units when grad_x passes and was compared somewhere."""
    exp = expect_backward(grad_out, x, weight, eps, inv, gw.dtype)
    nonfinite = row_mask(~exp.stats.finite, x.shape)
    alts = []
    for what, t in (("x", x), ("grad_out", grad_out), ("the weight", weight)):
        alt = _strides_ignored(t) if t is not None else None
        if alt is not None:
            a = {"x": (grad_out, alt, weight), "grad_out": (alt, x, weight)}.get(what, (grad_out, x, alt))
            alts.append((f"grad_x equals the result for {what} read in storage order as if it were contiguous: the "
                         f"strides {list(t.stride())} of {what} were ignored", backward_ref(*a, eps)[0]))
    msgs = [compare(f"{label}grad_x", gx, exp.gx_ref, exp.bound_x, check=row_mask(exp.rows_ok, x.shape),
                    strict_nonfinite=False, nan_ok=nonfinite, alternatives=tuple(alts), input_dtype=x.dtype,
                    nonfinite_rows=~exp.stats.finite, analysis=exp.analysis_x,
                    row_span=grad_x_span(grad_out, x, weight))]
    if weight_grad and exp.weight_comparable:
        any_nonfinite = bool((~exp.stats.finite).any())
        msgs.append(compare(f"{label}grad_weight", gw, exp.gw_ref, exp.bound_w, strict_nonfinite=False,
                            index_names=("col",), nan_ok=torch.full_like(exp.gw_ref, any_nonfinite, dtype=torch.bool),
                            input_dtype=x.dtype, analysis=exp.analysis_w,
                            row_span=grad_weight_span(grad_out, x, exp.stats.inv)))
    if measure is not None and not msgs[0]:
        # Against grad_x's leading term, |grad_out * weight| * inv_rms, not against grad_x: where the
        # terms cancel (a row of one element, grad_out like y) what is left is no measure of rounding.
        lead = (grad_out.detach().to(torch.float64) * weight.detach().to(torch.float64)).abs()
        lead = lead * inv.detach().to(torch.float64).reshape(tuple(x.shape[:-1]) + (1,)).abs()
        _measured(measure, "grad_x", worst_units(gx, exp.gx_ref, row_mask(exp.rows_ok, x.shape), x.dtype,
                                                 scale=lead.amax(-1, keepdim=True)))
    return msgs, exp.unverified_rows


def row_mask(mask_rows: torch.Tensor, shape) -> torch.Tensor:
    return mask_rows.unsqueeze(-1).expand(shape)
