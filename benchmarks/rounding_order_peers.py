"""Correct RMSNorms of each rounding order, written independently of order.emulate on purpose.

A law of the declared order compares a kernel with the eager emulation of its order; its threshold
has to come from how far correct kernels of that order land from the emulation. Real kernels reduce
in other orders than torch's CPU mean (CUDA threads' strided partials and warp shuffles, Triton's
tree, numpy's BLAS dot, a plain loop), divide or multiply by 1/N, and take rsqrt from hardware that is
off by up to 2 float32 ulps (CUDA's rsqrtf bound), so each peer below varies those on purpose; each
also rounds to the 16-bit dtype its own way where it can (numpy's float16, a bit-level bfloat16
rounding, a single rounding from float64).

Every peer: peer(x, weight, eps, *, weight_offset, residual, sum_in, residual_dtype, has_weight)
-> (y in x's dtype, residual_out or None), the same call as order.emulate. PEERS maps a name to
(function, declared order, the sum choices it implements).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

F32 = torch.float32


# ---- rounding to 16 bits, apart from torch's own conversion ----

def _bf16_bits_rne(a32: np.ndarray) -> np.ndarray:
    """float32 -> the float32 holding its bfloat16 rounding (to nearest, ties to even), on the bits."""
    b = np.ascontiguousarray(a32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    out = r.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(a32), np.float32("nan"), out)


def round16_np(a: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """float32 -> float32 values rounded (once) to dtype."""
    if dtype == torch.float16:
        return a.astype(np.float32).astype(np.float16).astype(np.float32)
    return _bf16_bits_rne(a.astype(np.float32))


def round16_from_f64(d: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """float64 -> float32 values rounded once to dtype (no stop at float32 on the way)."""
    if dtype == torch.float16:
        return d.astype(np.float16).astype(np.float32)  # numpy rounds double to half directly
    # Round to odd into float32 first: float32 keeps more than 2 bits beyond bfloat16's 8, so rounding
    # that to bfloat16 equals rounding d once.
    t = d.astype(np.float32)
    inexact = t.astype(np.float64) != d
    even = (t.view(np.uint32) & 1) == 0
    toward = np.where(d > t.astype(np.float64), np.float32(np.inf), np.float32(-np.inf))
    t = np.where(inexact & even & np.isfinite(t), np.nextafter(t, toward), t)
    return _bf16_bits_rne(t)


def _to16(a32: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a32, dtype=np.float32)).to(dtype)  # exact: already on the grid


# ---- row reductions of float32 squares, (rows, N) -> (rows, 1) ----

def _sum_lanes_np(sq: np.ndarray, threads: int = 128, vec: int = 4) -> np.ndarray:
    """A CUDA block's sum: thread t adds the vectors t, t + threads, ... one element after another,
    then a xor-shuffle butterfly inside each warp of 32, then warp 0 adds the warps' sums in turn."""
    rows, n = sq.shape
    per = threads * vec
    k = -(-n // per)
    pad = np.zeros((rows, k * per), np.float32)
    pad[:, :n] = sq
    chunks = pad.reshape(rows, k, threads, vec)
    acc = np.zeros((rows, threads), np.float32)
    for i in range(k):
        for e in range(vec):
            acc = acc + chunks[:, i, :, e]
    warps = acc.reshape(rows, threads // 32, 32)
    lane = np.arange(32)
    for m in (16, 8, 4, 2, 1):
        warps = warps + warps[:, :, lane ^ m]
    total = warps[:, 0, 0]
    for w in range(1, threads // 32):
        total = total + warps[:, w, 0]
    return total.reshape(rows, 1)


def _sum_tree_torch(sq: torch.Tensor) -> torch.Tensor:
    """A tree over the row padded to a power of two (Triton's tl.sum of a block), in sq's dtype: each
    level's adds round to it."""
    n = sq.shape[-1]
    size = 1 << max(0, (n - 1).bit_length())
    a = torch.nn.functional.pad(sq, (0, size - n))
    while a.shape[-1] > 1:
        h = a.shape[-1] // 2
        a = a[..., :h] + a[..., h:]
    return a


def _sum_sequential_torch(sq: torch.Tensor) -> torch.Tensor:
    """One element after another, left to right (a naive per-row loop)."""
    acc = torch.zeros(sq.shape[:-1] + (1,), dtype=sq.dtype)
    for j in range(sq.shape[-1]):
        acc = acc + sq[..., j:j + 1]
    return acc


def _rsqrtf_model(a: np.ndarray) -> np.ndarray:
    """rsqrt as hardware gives it: the correctly rounded float32 value moved by -2..2 ulps, the move a
    hash of the argument's bits (CUDA's rsqrtf is within 2 ulps; which way it errs is not documented)."""
    exact = (1.0 / np.sqrt(a.astype(np.float64))).astype(np.float32)
    h = (a.astype(np.float32).view(np.uint32).astype(np.uint64) * 2654435761) >> 13
    move = (h % 5).astype(np.int64) - 2
    bits = exact.view(np.uint32).astype(np.int64) + move
    moved = bits.astype(np.uint32).view(np.float32)
    return np.where(np.isfinite(exact) & (exact > 0), moved, exact)


# ---- the fused add, two ways ----

def _sum_torch(x, residual, sum_in, residual_dtype):
    if residual is None:
        return x, None
    rdt = residual_dtype or residual.dtype
    s32 = torch.add(x.to(F32), residual.to(F32))
    if sum_in == "float32":
        return s32, s32.to(rdt)
    stored = s32.to(rdt) if rdt != F32 else s32
    return stored, stored


def _sum_np(x, residual, sum_in, residual_dtype):
    """(float32 array the norm sees, residual_out tensor or None)."""
    a = x.to(F32).numpy()
    if residual is None:
        return a, None
    rdt = residual_dtype or residual.dtype
    s = a + residual.to(F32).numpy()
    if rdt == F32:
        return s, torch.from_numpy(s.copy())
    stored = round16_np(s, rdt)
    return (s if sum_in == "float32" else stored), _to16(stored, rdt)


def _weight_np(weight, weight_offset, has_weight):
    if not has_weight:
        return None
    w = weight.to(F32).numpy()
    return w + np.float32(weight_offset) if weight_offset else w


# ---- cast_then_multiply ----

def ctm_numpy_rows(x, weight, eps, *, weight_offset=0.0, residual=None, sum_in="float32", residual_dtype=None,
                   has_weight=True):
    """Row by row in numpy float32: BLAS dot for the sum of squares, 1/sqrt, x_hat rounded, then the
    weight product rounded (exact for a 16-bit weight, so one rounding)."""
    dt = x.dtype
    s, res = _sum_np(x, residual, sum_in, residual_dtype)
    w = _weight_np(weight, weight_offset, has_weight)
    rows = s.reshape(-1, s.shape[-1])
    out = np.empty_like(rows)
    n = np.float32(rows.shape[-1])
    for i, r in enumerate(rows):
        inv = np.float32(1.0) / np.sqrt(np.float32(np.dot(r, r)) / n + np.float32(eps))
        xh = round16_np(r * inv, dt)
        out[i] = xh if w is None else round16_np(xh * w, dt)  # a float32 weight: float32 product, rounded again
    return _to16(out.reshape(s.shape), dt), res


def ctm_cuda_like(x, weight, eps, *, weight_offset=0.0, residual=None, sum_in="float32", residual_dtype=None,
                  has_weight=True):
    """A CUDA block of 128 threads: strided partials, warp butterfly, mean as sum * (1/N), rsqrtf with
    its error, x_hat rounded to the dtype, the weight multiply after."""
    dt = x.dtype
    s, res = _sum_np(x, residual, sum_in, residual_dtype)
    w = _weight_np(weight, weight_offset, has_weight)
    rows = s.reshape(-1, s.shape[-1])
    ms = _sum_lanes_np(rows * rows) * np.float32(1.0 / rows.shape[-1])
    inv = _rsqrtf_model(ms + np.float32(eps))
    xh = round16_np(rows * inv, dt)
    y = xh if w is None else round16_np(xh * w, dt)
    return _to16(y.reshape(s.shape), dt), res


def ctm_triton_like(x, weight, eps, *, weight_offset=0.0, residual=None, sum_in="float32", residual_dtype=None,
                    has_weight=True):
    """A Triton program per row: tree sum, divide by N, rsqrt, x_hat.to(dtype), times the weight."""
    dt = x.dtype
    v, res = _sum_torch(x, residual, sum_in, residual_dtype)
    s = v.to(F32)
    inv = torch.rsqrt(_sum_tree_torch(s * s) / s.shape[-1] + eps)
    xh = (s * inv).to(dt)
    if not has_weight:
        return xh, res
    return (xh.to(F32) * (weight.to(F32) + weight_offset)).to(dt), res


def ctm_sequential(x, weight, eps, *, weight_offset=0.0, residual=None, sum_in="float32", residual_dtype=None,
                   has_weight=True):
    """A plain loop: squares added left to right, 1 / sqrt(mean + eps)."""
    dt = x.dtype
    v, res = _sum_torch(x, residual, sum_in, residual_dtype)
    s = v.to(F32)
    inv = 1.0 / torch.sqrt(_sum_sequential_torch(s * s) / s.shape[-1] + eps)
    xh = (s * inv).to(dt)
    if not has_weight:
        return xh, res
    return (xh.to(F32) * (weight.to(F32) + weight_offset)).to(dt), res


def ctm_f64_stats(x, weight, eps, *, weight_offset=0.0, residual=None, sum_in="float32", residual_dtype=None,
                  has_weight=True):
    """Statistics and x_hat in float64, x_hat rounded once to the dtype from float64."""
    dt = x.dtype
    s, res = _sum_np(x, residual, sum_in, residual_dtype)
    d = s.astype(np.float64)
    xh = round16_from_f64(d / np.sqrt((d * d).mean(-1, keepdims=True) + eps), dt)
    w = _weight_np(weight, weight_offset, has_weight)
    y = xh if w is None else round16_np(xh * w, dt)
    return _to16(y, dt), res


def ctm_rms_norm_fn(x, weight, eps, *, weight_offset=0.0, residual=None, sum_in="float32", residual_dtype=None,
                    has_weight=True):
    """torch's F.rms_norm without a weight for x_hat (its own CPU kernel and reduction), rounded to the
    dtype, then the weight multiply as HF writes it."""
    dt = x.dtype
    v, res = _sum_torch(x, residual, sum_in, residual_dtype)
    xh = F.rms_norm(v, (v.shape[-1],), None, eps).to(dt)
    if not has_weight:
        return xh, res
    if weight_offset == 0.0:
        return (weight * xh).to(dt), res
    return (xh.to(F32) * (weight.to(F32) + weight_offset)).to(dt), res


# ---- multiply_in_float32 ----

def mf32_numpy_rows(x, weight, eps, *, weight_offset=0.0, residual=None, sum_in="float32", residual_dtype=None,
                    has_weight=True):
    """Row by row in numpy float32: BLAS dot, 1/sqrt, rstd folded into the weight first (x * (rstd * w)),
    one rounding at the end."""
    dt = x.dtype
    s, res = _sum_np(x, residual, sum_in, residual_dtype)
    w = _weight_np(weight, weight_offset, has_weight)
    rows = s.reshape(-1, s.shape[-1])
    out = np.empty_like(rows)
    n = np.float32(rows.shape[-1])
    for i, r in enumerate(rows):
        inv = np.float32(1.0) / np.sqrt(np.float32(np.dot(r, r)) / n + np.float32(eps))
        out[i] = round16_np(r * inv if w is None else r * (inv * w), dt)
    return _to16(out.reshape(s.shape), dt), res


def mf32_cuda_like(x, weight, eps, *, weight_offset=0.0, residual=None, sum_in="float32", residual_dtype=None,
                   has_weight=True):
    """A CUDA block of 128 threads (as ctm_cuda_like), y = (x * rsqrtf) * w in float32, rounded once."""
    dt = x.dtype
    s, res = _sum_np(x, residual, sum_in, residual_dtype)
    w = _weight_np(weight, weight_offset, has_weight)
    rows = s.reshape(-1, s.shape[-1])
    inv = _rsqrtf_model(_sum_lanes_np(rows * rows) * np.float32(1.0 / rows.shape[-1]) + np.float32(eps))
    y = rows * inv if w is None else (rows * inv) * w
    return _to16(round16_np(y, dt).reshape(s.shape), dt), res


def mf32_tree_w_first(x, weight, eps, *, weight_offset=0.0, residual=None, sum_in="float32", residual_dtype=None,
                      has_weight=True):
    """A Triton-like tree sum; the weight multiplied before the statistic, (x * w) * rstd, in float32."""
    dt = x.dtype
    v, res = _sum_torch(x, residual, sum_in, residual_dtype)
    s = v.to(F32)
    rstd = torch.rsqrt(_sum_tree_torch(s * s) / s.shape[-1] + eps)
    y = s if not has_weight else s * (weight.to(F32) + weight_offset)
    return (y * rstd).to(dt), res


def mf32_f64(x, weight, eps, *, weight_offset=0.0, residual=None, sum_in="float32", residual_dtype=None,
             has_weight=True):
    """Everything in float64, one rounding to the dtype at the end."""
    dt = x.dtype
    s, res = _sum_np(x, residual, sum_in, residual_dtype)
    d = s.astype(np.float64)
    y = d / np.sqrt((d * d).mean(-1, keepdims=True) + eps)
    if has_weight:
        y = y * (weight.to(torch.float64).numpy() + weight_offset)
    return _to16(round16_from_f64(y, dt), dt), res


def mf32_rms_norm_fn(x, weight, eps, *, weight_offset=0.0, residual=None, sum_in="float32", residual_dtype=None,
                     has_weight=True):
    """torch's F.rms_norm with the weight (1 + w in float32 passed as a float32 weight for an offset)."""
    dt = x.dtype
    v, res = _sum_torch(x, residual, sum_in, residual_dtype)
    w = None
    if has_weight:
        w = weight if weight_offset == 0.0 and v.dtype == weight.dtype else weight.to(F32) + weight_offset
    if w is not None and w.dtype != v.dtype:
        v = v.to(F32)  # mixed dtypes: torch's fused CPU path refuses them; keep the float32 path explicit
    return F.rms_norm(v, (v.shape[-1],), w, eps).to(dt), res


# ---- all_in_dtype ----

def _dtype_sum(x, residual, sum_in, residual_dtype):
    if residual is None:
        return x, None
    s = x + residual  # Liger's fused add: S_row = X_row + R_row, in the dtype
    return s, s


def aid_sum_div(x, weight, eps, *, weight_offset=0.0, residual=None, sum_in="stored", residual_dtype=None,
                has_weight=True):
    """In the dtype, torch eager: sum of squares rounded, then divided (a second rounding), sqrt and its
    reciprocal rounded apart."""
    dt = x.dtype
    v, res = _dtype_sum(x, residual, sum_in, residual_dtype)
    ms = (v * v).sum(-1, keepdim=True) / v.shape[-1]
    rstd = 1.0 / torch.sqrt(ms + torch.tensor(eps, dtype=dt))
    xh = v * rstd
    if not has_weight:
        return xh, res
    return (xh * (torch.tensor(weight_offset, dtype=dt) + weight)).to(dt), res


def aid_tree16(x, weight, eps, *, weight_offset=0.0, residual=None, sum_in="stored", residual_dtype=None,
               has_weight=True):
    """In the dtype with a tree sum whose every add rounds to the dtype (a reduction kept in 16 bits)."""
    dt = x.dtype
    v, res = _dtype_sum(x, residual, sum_in, residual_dtype)
    ms = _sum_tree_torch(v * v) / v.shape[-1]
    rstd = torch.rsqrt(ms + torch.tensor(eps, dtype=dt))
    xh = v * rstd
    if not has_weight:
        return xh, res
    return (xh * (torch.tensor(weight_offset, dtype=dt) + weight)).to(dt), res


def liger_none(x, weight, eps, *, weight_offset=0.0, residual=None, sum_in="stored", residual_dtype=None,
               has_weight=True):
    """Liger's casting_mode "none" kernel as Triton types it (its block-row path): squares and tl.sum in
    the dtype (a tree), then / n_cols in float32 (Triton has no 16-bit division), + eps.to(dtype) in
    float32, rsqrt, X_row * rstd in float32, (offset.to(dtype) + W_row) in W's dtype, the product in
    float32, rounded by the store."""
    dt = x.dtype
    v, res = _dtype_sum(x, residual, sum_in, residual_dtype)
    ms = _sum_tree_torch(v * v).to(F32) / v.shape[-1]
    rstd = torch.rsqrt(ms + float(torch.tensor(eps, dtype=dt)))
    xh = v.to(F32) * rstd
    if not has_weight:
        return xh.to(dt), res
    wsum = torch.tensor(weight_offset, dtype=dt) + weight
    return (xh * wsum.to(F32)).to(dt), res


BOTH = ("float32", "stored")
PEERS = {
    "ctm_numpy_rows": (ctm_numpy_rows, "cast_then_multiply", BOTH),
    "ctm_cuda_like": (ctm_cuda_like, "cast_then_multiply", BOTH),
    "ctm_triton_like": (ctm_triton_like, "cast_then_multiply", BOTH),
    "ctm_sequential": (ctm_sequential, "cast_then_multiply", BOTH),
    "ctm_f64_stats": (ctm_f64_stats, "cast_then_multiply", BOTH),
    "ctm_rms_norm_fn": (ctm_rms_norm_fn, "cast_then_multiply", BOTH),
    "mf32_numpy_rows": (mf32_numpy_rows, "multiply_in_float32", BOTH),
    "mf32_cuda_like": (mf32_cuda_like, "multiply_in_float32", BOTH),
    "mf32_tree_w_first": (mf32_tree_w_first, "multiply_in_float32", BOTH),
    "mf32_f64": (mf32_f64, "multiply_in_float32", BOTH),
    "mf32_rms_norm_fn": (mf32_rms_norm_fn, "multiply_in_float32", BOTH),
    "aid_sum_div": (aid_sum_div, "all_in_dtype", ("stored",)),
    "aid_tree16": (aid_tree16, "all_in_dtype", ("stored",)),
    "liger_none": (liger_none, "all_in_dtype", ("stored",)),
}
