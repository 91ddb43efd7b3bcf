"""The rounding orders an RMSNorm ships in, as eager torch emulations (emulate); the float64 reference of
each variant (reference64); how far a 16-bit output is from an emulation, in roundings of its dtype
(order_distance); the outputs an order allows once its float32 values move a little (order_window,
window_misses); and which orders an output looks like (closest_order). benchmarks/rounding_order.py
measures them (docs/rounding-order.md says how the law of the declared order is set from them). Which
library each branch follows is named beside it, as read in its sources.

Orders (where the rounding to the 16-bit dtype happens):
- "cast_then_multiply": x_hat = x * rsqrt(mean(x^2) + eps) in float32, rounded to x's dtype, then
  multiplied by the weight (HF LlamaRMSNorm, Qwen3RMSNorm, vLLM's forward_static and vllm/ir rms_norm).
- "multiply_in_float32": x_hat times the weight promoted to float32, one rounding at the end (HF
  GemmaRMSNorm, the FlashInfer test reference, TransformerEngine, quack, flash-attn's Triton kernel;
  torch 2.14's F.rms_norm on CPU with a weight in x's dtype or none, as benchmarks/rounding_order.py
  measures).
- "all_in_dtype": every step in x's dtype, eps and the offset cast to it (Liger casting_mode "none",
  as its docstring states it; see emulate() for where Liger's Triton kernel departs from that).

Sum choices of a fused residual add (which sum the norm normalises):
- "float32": add in float32, normalise the float32 sum, store its rounding as the new residual (vLLM
  forward_static, FlashInfer, flash-attn, quack).
- "stored": add in the residual's dtype, normalise that stored sum (HF eager decoder layers, Liger's
  fused add).
The residual forms (returned, updated in place, prenorm) store the same values in other places, so
one emulation serves them all: y and residual_out here are the values; where they land is the form's.
"""

from __future__ import annotations

import torch

ORDERS = ("cast_then_multiply", "multiply_in_float32", "all_in_dtype")
SUMS = ("float32", "stored")
HALF_DTYPES = (torch.float16, torch.bfloat16)


def _check(x, weight, eps, order, weight_offset, residual, sum_in, residual_dtype, has_weight):
    if order not in ORDERS:
        raise ValueError(f"order: expected one of {ORDERS}, but got {order!r}")
    if sum_in not in SUMS:
        raise ValueError(f"sum_in: expected one of {SUMS}, but got {sum_in!r}")
    if not x.is_floating_point():
        raise TypeError(f"x: expected a floating-point tensor, but got {x.dtype}")
    if has_weight and weight is None:
        raise ValueError("weight: expected a tensor when has_weight=True, but got None")
    if has_weight and tuple(weight.shape) != tuple(x.shape[-1:]):
        raise ValueError(f"weight: expected shape {list(x.shape[-1:])}, but got {list(weight.shape)}")
    if not has_weight and weight_offset != 0.0:
        # No library adds an offset to a weight it does not have (Gemma's 1 + w needs a w).
        raise ValueError(f"weight_offset: expected 0.0 without a weight, but got {weight_offset!r}")
    if not (eps >= 0.0):
        raise ValueError(f"eps: expected a number >= 0, but got {eps!r}")
    if residual is not None and tuple(residual.shape) != tuple(x.shape):
        raise ValueError(f"residual: expected shape {list(x.shape)}, but got {list(residual.shape)}")
    if residual is None and residual_dtype is not None:
        raise ValueError(f"residual_dtype: expected None without a residual, but got {residual_dtype}")
    if order == "all_in_dtype" and residual is not None:
        rdt = residual_dtype or residual.dtype
        # Liger's fused add (the one all-in-dtype fused add shipped) adds X_row + R_row in the dtype and
        # normalises that; a float32 sum or a stream in another dtype has no library to follow.
        if sum_in != "stored" or rdt != x.dtype or residual.dtype != x.dtype:
            raise ValueError("all_in_dtype with a residual: expected sum_in='stored' and a residual in x's dtype "
                             f"({x.dtype}), but got sum_in={sum_in!r}, residual {residual.dtype}, residual_dtype {rdt}")


def _fused_sum(x, residual, sum_in, residual_dtype):
    """(the tensor the norm normalises, residual_out), or (x, None) without a residual."""
    if residual is None:
        return x, None
    rdt = residual_dtype or residual.dtype
    if sum_in == "float32":
        # vLLM RMSNorm.forward_static: x = x.to(float32); x = x + residual (promoted); residual = x.to(orig).
        # FlashInfer, flash-attn (residual_in_fp32 keeps rdt = float32) and quack (residual_dtype) alike.
        s = x.to(torch.float32) + residual.to(torch.float32)
        return s, s.to(rdt)
    if residual.dtype == rdt and x.dtype == rdt:
        # HF eager decoder layer: hidden_states = residual + hidden_states, in the stream's dtype.
        s = residual + x
    else:
        # A stream stored in another dtype (quack's residual_dtype): the sum rounded once into it.
        acc = torch.promote_types(rdt, torch.float32)
        s = (residual.to(acc) + x.to(acc)).to(rdt)
    return s, s


def _cast_then_multiply(v, weight, eps, weight_offset, has_weight, out_dtype):
    # HF LlamaRMSNorm.forward / vLLM forward_static: statistics and x_hat in float32, x_hat rounded to
    # the output dtype, then the weight multiply.
    hs = v.to(torch.float32)
    variance = hs.pow(2).mean(-1, keepdim=True)
    hs = hs * torch.rsqrt(variance + eps)
    hs = hs.to(out_dtype)
    if not has_weight:
        return hs  # vLLM forward_static with weight None
    if weight_offset == 0.0:
        # HF: self.weight * hidden_states.to(input_dtype). A 16-bit weight multiplies in the dtype (torch
        # rounds the exact float32 product once); a float32 weight promotes the product to float32, which
        # HF returns as float32 and an op whose output is in x's dtype rounds a second time, here.
        return (weight * hs).to(out_dtype)
    # Liger casting_mode "llama" with an offset: X_row.to(X_dtype) * (offset + W_row), offset a float32
    # scalar, so the sum and the product are float32 as Triton's promotion without the scalar rule types them
    # (Triton's later scalar rule keeps offset + W_row in W's dtype: another variant, not emulated). The
    # contract key's offset is the 1 added in float32 after promoting w, as Gemma does.
    return (hs.to(torch.float32) * (weight_offset + weight.to(torch.float32))).to(out_dtype)


def _multiply_in_float32(v, weight, eps, weight_offset, has_weight, out_dtype):
    # HF GemmaRMSNorm: output = self._norm(x.float()); output * (1.0 + self.weight.float()); type_as(x).
    # The FlashInfer test reference is the same with x * w.float() (offset 0).
    hs = v.to(torch.float32)
    hs = hs * torch.rsqrt(hs.pow(2).mean(-1, keepdim=True) + eps)
    if has_weight:
        hs = hs * (weight_offset + weight.to(torch.float32))
    return hs.to(out_dtype)


def _all_in_dtype(v, weight, eps, weight_offset, has_weight, out_dtype):
    # Liger casting_mode "none", as its docstring states it: compute in the input dtype, with eps and offset
    # cast to it (eps.to(X_row_dtype), offset.to(X_row_dtype)). In eager torch every step below rounds to
    # the dtype; torch's mean accumulates in float32 and rounds the mean once.
    # Liger's Triton kernel is not this bit for bit: Triton divides a 16-bit sum by n_cols in float32 (no
    # 16-bit division in PTX), so rstd and, in its block-row path, X_row * rstd are float32 there
    # (benchmarks/rounding_order.py measures how far apart they land).
    dt = out_dtype
    v = v.to(dt)
    eps_d = torch.tensor(eps, dtype=dt)
    ms = (v * v).mean(-1, keepdim=True)
    rstd = torch.rsqrt(ms + eps_d)
    xh = v * rstd
    if not has_weight:
        return xh
    offset_d = torch.tensor(weight_offset, dtype=dt)
    # Y_row = X_row * (offset + W_row): a float32 weight promotes the sum and product to float32, and the
    # store into Y (x's dtype) rounds it.
    return (xh * (offset_d + weight)).to(dt)


_CORES = {"cast_then_multiply": _cast_then_multiply, "multiply_in_float32": _multiply_in_float32,
          "all_in_dtype": _all_in_dtype}


def emulate(x, weight, eps, *, order, weight_offset=0.0, residual=None, sum_in="float32", residual_dtype=None,
            has_weight=True):
    """(y, residual_out or None): the eager computation of the declared order, y in x's dtype and
    residual_out in residual_dtype (default: the residual's dtype). residual_dtype=float32 with a 16-bit
    x is flash-attn's residual_in_fp32 / quack's residual_dtype: the sum stays float32, so "float32" and
    "stored" are the same computation there."""
    _check(x, weight, eps, order, weight_offset, residual, sum_in, residual_dtype, has_weight)
    v, residual_out = _fused_sum(x, residual, sum_in, residual_dtype)
    y = _CORES[order](v, weight if has_weight else None, float(eps), float(weight_offset), has_weight, x.dtype)
    return y, residual_out


def reference64(x, weight, eps, *, order, weight_offset=0.0, residual=None, sum_in="float32", residual_dtype=None,
                has_weight=True):
    """(y, residual_out or None) in float64: the value each variant approximates. The order itself leaves
    no mark on the ideal value except that all_in_dtype declares eps and the offset in x's dtype, so
    they are taken as rounded there. With sum_in="stored" the reference normalises the sum rounded to the
    residual's dtype, since that stored sum is what the user asked to normalise; with "float32" it
    normalises the exact sum."""
    _check(x, weight, eps, order, weight_offset, residual, sum_in, residual_dtype, has_weight)
    f64 = torch.float64
    if residual is None:
        s, residual_out = x.to(f64), None
    elif sum_in == "stored":
        stored, _ = _fused_sum(x, residual, "stored", residual_dtype)
        s = residual_out = stored.to(f64)
    else:
        s = residual_out = x.to(f64) + residual.to(f64)
    e, off = float(eps), float(weight_offset)
    if order == "all_in_dtype":
        e = float(torch.tensor(e, dtype=x.dtype))
        off = float(torch.tensor(off, dtype=x.dtype))
    y = s / torch.sqrt(s.pow(2).mean(-1, keepdim=True) + e)
    if has_weight:
        y = y * (off + weight.to(f64))
    return y, residual_out


def _keys(t: torch.Tensor) -> torch.Tensor:
    """Each 16-bit value's place on the number line as an int32 (consecutive values differ by 1; +0 and -0
    share 0), so the difference of two keys counts the roundings between the values."""
    bits = t.contiguous().view(torch.int16).to(torch.int32)
    mag = bits & 0x7FFF
    return torch.where(bits < 0, -mag, mag)


def order_distance(got: torch.Tensor, emulated: torch.Tensor, dtype: torch.dtype) -> dict:
    """How far got is from emulated, both in dtype (16-bit): elements, how many differ, how many by
    0, 1, 2 and more units in the last place of the dtype (ulps: representable values apart, across
    binades), the worst (inf where one side is NaN and the other not), the first element at the worst,
    and how many rows (over the last dimension) hold a difference: a statistic of the row rounded
    apart moves a whole row. +0 and -0 count as equal, and so do two NaNs."""
    if dtype not in HALF_DTYPES:
        raise ValueError(f"dtype: expected float16 or bfloat16, but got {dtype}")
    if got.dtype != dtype or emulated.dtype != dtype:
        raise TypeError(f"order_distance: expected both tensors in {dtype}, but got {got.dtype} and {emulated.dtype}")
    if got.shape != emulated.shape:
        raise ValueError(f"order_distance: expected equal shapes, but got {list(got.shape)} and {list(emulated.shape)}")
    g, e = got.contiguous().reshape(-1), emulated.contiguous().reshape(-1)
    # Nearly every element of a kernel in the declared order matches bit for bit: compare the bits in one
    # pass and place only the elements that differ on the number line.
    idx = (g.view(torch.int16) != e.view(torch.int16)).nonzero().squeeze(1)
    gs, es = g[idx], e[idx]
    d = (_keys(gs) - _keys(es)).abs()
    gn, en = torch.isnan(gs), torch.isnan(es)
    d = torch.where(gn & en, 0, d)
    nan_mismatch = gn ^ en
    counts = torch.bincount(d.clamp(max=3), minlength=4)
    worst = float("inf") if bool(nan_mismatch.any()) else (int(d.max()) if d.numel() else 0)
    at = torch.where(nan_mismatch, torch.iinfo(torch.int32).max, d)
    n = max(got.shape[-1], 1) if got.dim() else 1
    rows = torch.zeros(g.numel() // n if g.numel() else 0, dtype=torch.bool)
    rows[idx[d > 0] // n] = True
    return {
        "elements": g.numel(),
        "differ": int(d.numel() - counts[0]),
        "ulps": {0: int(g.numel() - d.numel() + counts[0]), 1: int(counts[1]), 2: int(counts[2]),
                 "more": int(counts[3])},
        "worst": worst,
        "worst_at": int(idx[at.argmax()]) if worst else None,
        "nan_mismatch": int(nan_mismatch.sum()),
        "rows_differ": int(rows.sum()),
    }


def _round16(d: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # float64 -> dtype through float32, as torch converts and as a float32 kernel's value reaches the dtype.
    return d.to(torch.float32).to(dtype)


def order_window(x, weight, eps, *, order, rel, weight_offset=0.0, residual=None, sum_in="float32",
                 residual_dtype=None, has_weight=True):
    """(lo, hi, nan): for each element the range of 16-bit outputs (as order_distance's number-line keys)
    that the declared order gives when every float32 value of the emulation before a rounding to the
    dtype is moved by a relative rel at most: the room a correct kernel's own float32 arithmetic takes
    (another reduction order, rsqrtf's ulps). Where such a value sits near a 16-bit tie both neighbours
    are in range; elsewhere lo == hi is the emulation. nan: where the window holds a NaN. rel may be a
    sequence: then a list of windows, one per rel, sharing the statistic. Written for cast_then_multiply
    and multiply_in_float32, whose 16-bit roundings all follow float32 values (all_in_dtype rounds its
    row statistic to 16 bits)."""
    _check(x, weight, eps, order, weight_offset, residual, sum_in, residual_dtype, has_weight)
    if order == "all_in_dtype":
        raise ValueError("order_window: expected cast_then_multiply or multiply_in_float32, but got all_in_dtype")
    rels = list(rel) if isinstance(rel, (list, tuple)) else [rel]
    if not all(r >= 0.0 for r in rels):
        raise ValueError(f"rel: expected numbers >= 0, but got {rel!r}")
    dt = x.dtype
    v, _ = _fused_sum(x, residual, sum_in, residual_dtype)
    hs = v.to(torch.float32)
    a = hs * torch.rsqrt(hs.pow(2).mean(-1, keepdim=True) + float(eps))
    w = (weight.to(torch.float64) + float(weight_offset)) if has_weight else None
    a64 = a.to(torch.float64)
    windows = []
    for r in rels:
        down, up = 1.0 - r, 1.0 + r
        if order == "multiply_in_float32":
            # The float32 product a * w before the cast, moved; w + offset is exact in float64.
            t = a64 if w is None else a64 * w.to(torch.float32).to(torch.float64)
            ends = [_round16(t * down, dt), _round16(t * up, dt)]
        else:
            xh = [_round16(a64 * down, dt), _round16(a64 * up, dt)]
            # A 16-bit weight's product is exact in float32; a float32 weight's is rounded to float32 and
            # then to the dtype, the two roundings HF's float32 weight gives.
            ends = xh if w is None else [_round16(h.to(torch.float64) * w * f, dt) for h in xh for f in (down, up)]
        keys = torch.stack([_keys(e) for e in ends])
        nan = torch.stack([torch.isnan(e) for e in ends]).any(0)
        windows.append((keys.min(0).values.reshape(x.shape), keys.max(0).values.reshape(x.shape),
                        nan.reshape(x.shape)))
    return windows if isinstance(rel, (list, tuple)) else windows[0]


def window_misses(got: torch.Tensor, window) -> int:
    """Elements of got outside order_window's range (a NaN is inside only where the window holds one)."""
    lo, hi, nan = window
    k = _keys(got).reshape(lo.shape)
    gn = torch.isnan(got).reshape(lo.shape)
    outside = torch.where(gn | nan, gn != nan, (k < lo) | (k > hi))
    return int(outside.sum())


def closest_order(got, x, weight, eps, *, weight_offset=0.0, residual=None, residual_dtype=None, has_weight=True,
                  rel=None):
    """The diagnosis: every (order, sum) emulation this call allows, each one's order_distance from got
    (and, with rel, its window_misses against that order's window: all_in_dtype has no window), ranked by
    window misses where there are windows, then by elements off, then by the worst; and which emulations
    compute the same bits on this input (one group per set of identical ones), since a case cannot tell
    those apart."""
    dtype = x.dtype
    combos = []
    for order in ORDERS:
        for sum_in in (SUMS if residual is not None else ("float32",)):
            kw = dict(order=order, weight_offset=weight_offset, residual=residual, sum_in=sum_in,
                      residual_dtype=residual_dtype, has_weight=has_weight)
            try:
                y, _ = emulate(x, weight, eps, **kw)
            except ValueError:
                continue  # a combination no library ships (all_in_dtype with a float32 sum)
            d = order_distance(got, y, dtype)
            if rel is not None:
                d["window_misses"] = (window_misses(got, order_window(x, weight, eps, rel=rel, **kw))
                                      if order != "all_in_dtype" else None)
            combos.append(((order, sum_in) if residual is not None else (order,), y, d))
    ranked = sorted(((name, d) for name, _, d in combos),
                    key=lambda r: (r[1].get("window_misses") if r[1].get("window_misses") is not None
                                   else float("inf") if rel is not None else 0, r[1]["differ"], r[1]["worst"]))
    groups: list[list] = []
    for name, y, _ in combos:
        for grp in groups:
            if torch.equal(_keys(grp[0][1]), _keys(y)) and torch.equal(torch.isnan(grp[0][1]), torch.isnan(y)):
                grp.append((name, y))
                break
        else:
            groups.append([(name, y)])
    return {"ranked": ranked, "identical": [[n for n, _ in g] for g in groups if len(g) > 1]}
