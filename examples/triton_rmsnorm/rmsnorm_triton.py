"""An RMSNorm written in Triton, for clarity and correctness rather than speed, as a module target
of the gate (``module:examples.triton_rmsnorm.rmsnorm_triton``).

    forward(x, weight, eps) -> (y, inv_rms)
    backward(grad_out, x, weight, inv_rms) -> (grad_x, grad_weight)

x is [..., N] in float32, float64, float16 or bfloat16; weight is [N] in x's dtype or float32.
Statistics are kept in float32 (float64 for float64 x). With a weight in x's dtype, y is
(x * inv_rms) rounded to x's dtype, then times the weight (Hugging Face's rounding); with a
float32 weight the product is taken in float32 and rounded once. grad_weight comes back in the
statistics' dtype, as autograd casts it to the weight's.

The forward runs one program per row; the backward runs a few programs, each over every
programs-th row, that add their rows' share of grad_weight into a row of float32 partial sums of
their own; the partials are summed after the kernel (no atomics, so the sum is deterministic).
Rows longer than 4096 elements are covered by a loop over blocks of 4096.

It is written for the compiled path on a GPU as well as for CPU tensors under Triton's
interpreter (TRITON_INTERPRET=1, set before triton is imported); only the interpreter has run it
so far (NOTES.md).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

MAX_BLOCK = 4096  # elements of a row one program holds at a time; longer rows loop over blocks
CPU_PROGRAMS = 8  # backward programs under the interpreter, where programs run one after another

RMSNORM_CONTRACT = {
    "dtypes": ["float32", "float64", "float16", "bfloat16"],
    "weight_dtypes": ["same", "float32"],
    "layouts": ["contiguous", "transposed", "col_step", "row_step", "offset", "padded", "batch_transposed",
                "broadcast"],
    "weight_layouts": ["contiguous", "offset", "col_step"],
    "zero_rows": True,
}

_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


@triton.jit
def _round_to(v, DTYPE: tl.constexpr):
    """v (float32 or float64) rounded to the nearest DTYPE value, ties to even."""
    if DTYPE == tl.bfloat16:
        # Triton 3.8's interpreter truncates float32 -> bfloat16 (with or without
        # fp_downcast_rounding="rtne"), so round to nearest even by hand; the result is exact in
        # bfloat16 and the conversion below cannot change it. NaN is kept apart: adding to its
        # bits could carry a payload into the exponent.
        bits = v.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        v = tl.where(v != v, v, bits.to(tl.float32, bitcast=True))  # noqa: PLR0124 (v != v: NaN)
    return v.to(DTYPE)


@triton.jit
def _forward_kernel(X, W, Y, INV, EPS, n,
                    x_row_stride, x_col_stride, w_stride, y_row_stride, y_col_stride,
                    BLOCK: tl.constexpr, ACC: tl.constexpr, ROUND_BEFORE_WEIGHT: tl.constexpr):
    # int64 before any stride multiplies it: row * row_stride passes 2^31 in large tensors.
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * x_row_stride
    y_row = Y + row * y_row_stride

    sum_sq = tl.zeros([BLOCK], dtype=ACC)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK).to(tl.int64)
        x = tl.load(x_row + cols * x_col_stride, mask=cols < n, other=0.0).to(ACC)
        sum_sq += x * x
    mean_sq = tl.sum(sum_sq, axis=0) / n + tl.load(EPS)
    if ACC == tl.float64:
        root = tl.sqrt(mean_sq)  # IEEE-rounded in float64
    else:
        root = tl.sqrt_rn(mean_sq)  # tl.sqrt of a float32 is an approximation on a GPU
    inv_rms = 1.0 / root
    tl.store(INV + row, inv_rms)

    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK).to(tl.int64)
        in_row = cols < n
        x = tl.load(x_row + cols * x_col_stride, mask=in_row, other=0.0).to(ACC)
        w = tl.load(W + cols * w_stride, mask=in_row, other=0.0).to(ACC)
        if ROUND_BEFORE_WEIGHT:
            # The normalised value is rounded to x's dtype first; the product of two 16-bit
            # floats is exact in float32, so one more rounding gives their product in that dtype.
            y = _round_to(x * inv_rms, Y.dtype.element_ty).to(ACC) * w
        else:
            y = x * inv_rms * w
        tl.store(y_row + cols * y_col_stride, _round_to(y, Y.dtype.element_ty), mask=in_row)


@triton.jit
def _backward_kernel(DY, X, W, INV, DX, DW_PARTIAL, n_rows, n,
                     dy_row_stride, dy_col_stride, x_row_stride, x_col_stride, w_stride,
                     dx_row_stride, dx_col_stride,
                     BLOCK: tl.constexpr, ACC: tl.constexpr):
    program = tl.program_id(0)
    partial = DW_PARTIAL + program.to(tl.int64) * n  # this program's own row of partial sums
    for r in range(program, n_rows, tl.num_programs(0)):
        # tl.cast rather than r.to: under the interpreter a loop index is a Python int.
        row = tl.cast(r, tl.int64)
        dy_row = DY + row * dy_row_stride
        x_row = X + row * x_row_stride
        dx_row = DX + row * dx_row_stride
        inv_rms = tl.load(INV + row)

        # sum(grad_out * weight * x) over the row, which every element's grad_x needs
        dot = tl.zeros([BLOCK], dtype=ACC)
        for start in range(0, n, BLOCK):
            cols = start + tl.arange(0, BLOCK).to(tl.int64)
            in_row = cols < n
            dy = tl.load(dy_row + cols * dy_col_stride, mask=in_row, other=0.0).to(ACC)
            x = tl.load(x_row + cols * x_col_stride, mask=in_row, other=0.0).to(ACC)
            w = tl.load(W + cols * w_stride, mask=in_row, other=0.0).to(ACC)
            dot += dy * w * x
        c = inv_rms * inv_rms * tl.sum(dot, axis=0) / n

        for start in range(0, n, BLOCK):
            cols = start + tl.arange(0, BLOCK).to(tl.int64)
            in_row = cols < n
            dy = tl.load(dy_row + cols * dy_col_stride, mask=in_row, other=0.0).to(ACC)
            x = tl.load(x_row + cols * x_col_stride, mask=in_row, other=0.0).to(ACC)
            w = tl.load(W + cols * w_stride, mask=in_row, other=0.0).to(ACC)
            dx = inv_rms * (dy * w - x * c)
            tl.store(dx_row + cols * dx_col_stride, _round_to(dx, DX.dtype.element_ty), mask=in_row)
            dw_sum = tl.load(partial + cols, mask=in_row, other=0.0)
            tl.store(partial + cols, dw_sum + dy * x * inv_rms, mask=in_row)


def _acc(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _tl(dtype: torch.dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


def _check_x_weight(x, weight, who: str) -> None:
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError(f"rmsnorm: {who}: expected x and weight to be tensors, but got {type(x).__name__} and "
                        f"{type(weight).__name__}")
    if x.dtype not in _FLOATS:
        raise TypeError(f"rmsnorm: {who}: expected x in float32, float64, float16 or bfloat16, but got {x.dtype}")
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"rmsnorm: {who}: expected x of shape [..., N] with N >= 1, but got shape {list(x.shape)}")
    n = x.shape[-1]
    if weight.dim() != 1 or weight.shape[0] != n:
        raise ValueError(f"rmsnorm: {who}: expected weight of shape [{n}] (N of x), but got shape {list(weight.shape)}")
    if weight.dtype not in (x.dtype, torch.float32):
        raise TypeError(f"rmsnorm: {who}: expected weight in x's dtype ({x.dtype}) or float32, but got {weight.dtype}")
    if weight.device != x.device:
        raise ValueError(f"rmsnorm: {who}: expected weight on x's device ({x.device}), but got {weight.device}")


def _block(n: int) -> int:
    return min(MAX_BLOCK, triton.next_power_of_2(n))


def forward(x: torch.Tensor, weight: torch.Tensor, eps: float):
    """(y, inv_rms): y like x, inv_rms [...] in float32 (float64 for float64 x)."""
    _check_x_weight(x, weight, "forward")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"rmsnorm: forward: expected eps to be a float, but got {type(eps).__name__}")
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"rmsnorm: forward: expected eps to be finite and >= 0, but got {eps}")
    n = x.shape[-1]
    acc = _acc(x.dtype)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    inv_rms = torch.empty(x.shape[:-1], dtype=acc, device=x.device)
    rows = inv_rms.numel()
    if rows == 0:
        return y, inv_rms
    # A view whenever the leading dims collapse into one row stride; a copy when they do not (a
    # permuted batch), as the kernel takes one stride a row.
    x2 = x.reshape(rows, n)
    y2 = y.view(rows, n)
    # eps goes in a tensor of the statistics' dtype: Triton passes a Python float as float32, which
    # would round a float64 run's eps.
    eps_t = torch.full((1,), eps, dtype=acc, device=x.device)
    _forward_kernel[(rows,)](
        x2, weight, y2, inv_rms, eps_t, n,
        x2.stride(0), x2.stride(1), weight.stride(0), y2.stride(0), y2.stride(1),
        BLOCK=_block(n), ACC=_tl(x.dtype), ROUND_BEFORE_WEIGHT=weight.dtype == x.dtype,
    )
    return y, inv_rms


def _backward_programs(rows: int, device: torch.device) -> int:
    if device.type == "cuda":
        return min(rows, torch.cuda.get_device_properties(device).multi_processor_count)
    return min(rows, CPU_PROGRAMS)


def backward(grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, inv_rms: torch.Tensor):
    """(grad_x, grad_weight): grad_x like x, grad_weight [N] in float32 (float64 for float64 x)."""
    _check_x_weight(x, weight, "backward")
    n = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    if not isinstance(grad_out, torch.Tensor) or grad_out.shape != x.shape or grad_out.dtype != x.dtype:
        got = (f"shape {list(grad_out.shape)} in {grad_out.dtype}" if isinstance(grad_out, torch.Tensor)
               else type(grad_out).__name__)
        raise ValueError(f"rmsnorm: backward: expected grad_out of x's shape {list(x.shape)} in {x.dtype}, "
                         f"but got {got}")
    if not isinstance(inv_rms, torch.Tensor) or inv_rms.numel() != rows or not inv_rms.is_floating_point():
        got = (f"{inv_rms.numel()} elements in {inv_rms.dtype}" if isinstance(inv_rms, torch.Tensor)
               else type(inv_rms).__name__)
        raise ValueError(f"rmsnorm: backward: expected inv_rms of floats with one value a row ({rows}), but got {got}")
    if grad_out.device != x.device or inv_rms.device != x.device:
        raise ValueError(f"rmsnorm: backward: expected grad_out and inv_rms on x's device ({x.device}), but got "
                         f"{grad_out.device} and {inv_rms.device}")
    acc = _acc(x.dtype)
    grad_x = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if rows == 0:
        return grad_x, torch.zeros(n, dtype=acc, device=x.device)
    x2 = x.reshape(rows, n)
    dy2 = grad_out.reshape(rows, n)
    dx2 = grad_x.view(rows, n)
    inv = inv_rms.reshape(rows).to(acc).contiguous()
    programs = _backward_programs(rows, x.device)
    partials = torch.zeros(programs, n, dtype=acc, device=x.device)
    _backward_kernel[(programs,)](
        dy2, x2, weight, inv, dx2, partials, rows, n,
        dy2.stride(0), dy2.stride(1), x2.stride(0), x2.stride(1), weight.stride(0),
        dx2.stride(0), dx2.stride(1),
        BLOCK=_block(n), ACC=_tl(x.dtype),
    )
    return grad_x, partials.sum(0)
