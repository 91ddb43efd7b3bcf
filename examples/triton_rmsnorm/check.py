"""Checks a Triton RMSNorm against tests/targets/correct_torch.py on inputs built here: the sweep
over shapes, dtypes and layouts that rmsnorm_triton.py was verified with, and the comparison that
check_mutants.py uses.

    TRITON_INTERPRET=1 python3 examples/triton_rmsnorm/check.py    # from the repository root

Each output must lie within one unit in the last place of its own dtype of correct_torch's (so the
two may round a float32 value to either side) plus 16 float32 (float64 for float64 input)
roundings of the largest magnitude in its row (sums taken in another order); y with a weight in
x's dtype, one more unit of x * inv_rms times the weight (rounded before the weight multiplies
it); grad_weight and inv_rms are held per tensor. A mutant's errors are of the size of the values
themselves.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch

from tests.targets import correct_torch

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}
X_LAYOUTS = ("contiguous", "transposed", "col_step", "offset", "batch_transposed", "broadcast", "row_step",
             "padded")
GRAD_LAYOUTS = ("contiguous", "expanded", "transposed", "col_step", "padded")
ROW_STRIDE_2_30 = "row_stride_2_30"  # 3 rows, a row stride of 2^30 elements: offsets past 2^31 (see huge_rows)


def _ulp(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One unit in the last place of dtype at |v| (float64), the smallest normal's below it."""
    fi = torch.finfo(dtype)
    a = v.abs().clamp_min(fi.tiny)
    _, e = torch.frexp(a)
    return torch.ldexp(torch.full_like(a, fi.eps), e - 1)


def _excess(got: torch.Tensor, ref: torch.Tensor, acc_eps: float, per_row: bool,
            extra: torch.Tensor | None = None) -> float:
    """The largest |got - ref| / bound (> 1: outside); inf where one is NaN and the other is not.
    extra: more bound, element by element (float64, ref's shape)."""
    g, r = got.double(), ref.double()
    if g.shape != r.shape:
        return float("inf")
    if g.numel() == 0:
        return 0.0
    both_nan = torch.isnan(g) & torch.isnan(r)
    same_inf = torch.isinf(g) & (g == r)
    g2 = g.reshape(-1, g.shape[-1]) if per_row and g.dim() else g.reshape(1, -1)
    r2 = r.reshape(g2.shape)
    scale = torch.nan_to_num(r2.abs(), nan=0.0, posinf=0.0).amax(-1, keepdim=True)
    bound = _ulp(r2, got.dtype) + 16 * acc_eps * scale
    if extra is not None:
        bound = bound + extra.reshape(g2.shape)
    err = (g2 - r2).abs() / bound
    ok = (both_nan | same_inf).reshape(g2.shape)
    err = torch.where(ok, torch.zeros_like(err), torch.nan_to_num(err, nan=float("inf")))
    return float(err.max())


def compare(module, x, weight, eps, grad_out) -> dict[str, float]:
    """How far module's outputs lie from correct_torch's, in units of the bound (> 1: wrong);
    inf for a wrong shape or dtype, a NaN where there should be none, or an exception."""
    acc_eps = torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps
    y_ref, inv_ref = correct_torch.forward(x, weight, eps)
    gx_ref, gw_ref = correct_torch.backward(grad_out, x, weight, inv_ref)
    out = {}
    try:
        y, inv = module.forward(x, weight, eps)
        extra = None
        if weight.dtype == x.dtype:
            # x * inv_rms is rounded to x's dtype before the weight multiplies it: where the two
            # round it to either side, the weight scales that unit in the last place.
            w64 = weight.double().abs()
            extra = _ulp(y_ref.double() / w64, x.dtype) * w64
        out["y"] = _excess(y, y_ref, acc_eps, True, extra) if y.dtype == y_ref.dtype else float("inf")
        out["inv_rms"] = _excess(inv, inv_ref, acc_eps, False) if inv.dtype == inv_ref.dtype else float("inf")
        gx, gw = module.backward(grad_out, x, weight, inv_ref)
        out["grad_x"] = _excess(gx, gx_ref, acc_eps, True) if gx.dtype == gx_ref.dtype else float("inf")
        out["grad_weight"] = _excess(gw, gw_ref, acc_eps, False) if gw.dtype == gw_ref.dtype else float("inf")
    except Exception as e:  # noqa: BLE001 (a mutant may raise anything: that is a kill too)
        out["raised"] = float("inf")
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    return out


def place(v: torch.Tensor, layout: str) -> torch.Tensor:
    """v (contiguous) copied into a tensor of the same shape and values with the given layout."""
    shape = tuple(v.shape)
    if layout == "contiguous":
        return v.clone()
    if layout == "transposed":
        return v.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "col_step":
        store = torch.full(shape[:-1] + (2 * shape[-1],), float("nan"), dtype=v.dtype)
        store[..., ::2] = v
        return store[..., ::2]
    if layout == "offset":
        store = torch.full((v.numel() + 1,), float("nan"), dtype=v.dtype)
        store[1:] = v.reshape(-1)
        return store[1:].view(shape)
    if layout == "batch_transposed":
        return v.transpose(0, 1).contiguous().transpose(0, 1)
    if layout == "row_step":  # every other row of the storage
        store = torch.full(shape[:-2] + (2 * shape[-2], shape[-1]), float("nan"), dtype=v.dtype)
        store[..., ::2, :] = v
        return store[..., ::2, :]
    if layout == "padded":  # rows 3 elements longer than N in the storage
        store = torch.full(shape[:-1] + (shape[-1] + 3,), float("nan"), dtype=v.dtype)
        store[..., : shape[-1]] = v
        return store[..., : shape[-1]]
    if layout == "broadcast":  # every row the first one: row strides 0
        return v.reshape(-1, shape[-1])[:1].clone().reshape((1,) * (len(shape) - 1) + shape[-1:]).expand(shape)
    if layout == "expanded":  # what autograd hands the backward of y.sum(): one value, every stride 0
        return torch.ones((), dtype=v.dtype).expand(shape)
    raise ValueError(f"place: expected a layout from {X_LAYOUTS + GRAD_LAYOUTS}, but got {layout!r}")


def possible(layout: str, shape: tuple[int, ...]) -> bool:
    rows = 1
    for s in shape[:-1]:
        rows *= s
    if layout in ("contiguous", "expanded", "offset"):
        return True
    if layout == "transposed":
        return len(shape) >= 2
    if layout == "col_step":
        return True
    if layout == "batch_transposed":
        return len(shape) >= 3
    if layout in ("row_step", "padded"):
        return len(shape) >= 2
    if layout == "broadcast":
        return len(shape) >= 2 and rows >= 2
    raise ValueError(f"possible: unknown layout {layout!r}")


def huge_rows(n: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """3 rows of n at a row stride of 2^30 elements, the first at element 2^31 of a storage of
    2^32 + n elements (8 GiB of bfloat16): row 2 starts at element 2^31 from x's first, past int32,
    so int32 row offsets wrap to -2^31, which is still inside the storage (its untouched zeros)
    rather than outside the process' memory. The storage is allocated and never written but for
    the three rows: the pages nobody touches take no memory."""
    stride = 1 << 30
    store = torch.empty((1 << 32) + n, dtype=dtype)
    x = store.as_strided((3, n), (stride, 1), storage_offset=1 << 31)
    for r in range(3):
        x[r] = torch.randn(n, generator=gen, dtype=torch.float64).to(dtype)
    store[:n].zero_()  # where a wrapped row 2 reads
    return x


def inputs(shape, dtype: str, weight_dtype: str, layout: str, grad_layout: str, seed: int = 0):
    """x, weight, grad_out for a case: normal values scaled per row, the first row zero where
    there are 3 rows or more (the eps path)."""
    gen = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]
    wdt = dt if weight_dtype == "same" else DTYPES[weight_dtype]
    n = shape[-1]
    if layout == ROW_STRIDE_2_30:
        x = huge_rows(n, dt, gen)
        shape = tuple(x.shape)
    else:
        v = torch.randn(*shape, generator=gen, dtype=torch.float64)
        if len(shape) >= 1 and v.numel():
            v = v * torch.exp(torch.randn(*shape[:-1], 1, generator=gen, dtype=torch.float64))
            if v.numel() // n >= 3:
                v.reshape(-1, n)[0] = 0
        x = place(v.to(dt), layout)
    w = torch.randn(n, generator=gen, dtype=torch.float64).to(wdt)
    g = torch.randn(*shape, generator=gen, dtype=torch.float64).to(dt)
    return x, w, place(g, grad_layout)


def _sweep_cases():
    ns = list(range(1, 34)) + [47, 63, 64, 65, 100, 127, 128, 129, 200, 255, 256, 257, 299, 300,
                               4095, 4096, 4097, 9000]
    i = 0
    for rows in (0, 1, 3, 70):
        for n in ns:
            if rows == 70 and n > 300 and n != 4097:
                continue  # 70 long rows take the interpreter minutes: 4097 stands for them
            for dtype in DTYPES:
                for wdt in ("same", "float32"):
                    if wdt == "float32" and dtype == "float32":
                        continue
                    shape = (7, 10, n) if rows == 70 and i % 3 == 0 else (rows, n)
                    layout = X_LAYOUTS[i % len(X_LAYOUTS)]
                    if not possible(layout, shape) or (rows == 0 and layout != "contiguous"):
                        layout = "contiguous"
                    grad = GRAD_LAYOUTS[(i // len(X_LAYOUTS)) % len(GRAD_LAYOUTS)]
                    if rows == 0:
                        grad = "contiguous"
                    yield shape, dtype, wdt, layout, grad, i
                    i += 1


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
        print("check: expected TRITON_INTERPRET=1 (no GPU here), but it is not set", file=sys.stderr)
        return 2
    from examples.triton_rmsnorm import rmsnorm_triton

    start = time.perf_counter()
    worst: dict[str, float] = {}
    bad = 0
    count = 0
    for shape, dtype, wdt, layout, grad, seed in _sweep_cases():
        x, w, g = inputs(shape, dtype, wdt, layout, grad, seed)
        res = compare(rmsnorm_triton, x, w, 1e-6 if seed % 2 else 1e-5, g)
        count += 1
        for k, v in res.items():
            if k != "error":
                worst[k] = max(worst.get(k, 0.0), v)
        if any(v > 1 for k, v in res.items() if k != "error"):
            bad += 1
            print(f"WRONG {shape} {dtype} weight={wdt} x={layout} grad_out={grad}: {res}")
    print(f"{count} cases, {bad} wrong, in {time.perf_counter() - start:.0f} s; worst error in units of the "
          f"bound: " + ", ".join(f"{k} {v:.3f}" for k, v in worst.items()))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
