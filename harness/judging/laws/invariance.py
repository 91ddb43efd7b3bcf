"""Laws that need no reference: scale, rows, layout, determinism."""

from __future__ import annotations

import torch

from harness.judging import judge, tolerance as tol
from harness.judging.cases import Case, materialize
from harness.judging.target import NotApplicable, Target
from harness.judging.laws.common import _bits, _fail, _same_bits, inv_for_backward
from harness.judging.laws.registry import law
from harness.judging.cases import values

@law()
def scale_invariance(target: Target, case: Case):
    """With eps = 0, y(2^k x) equals y(x) within the rounding bound (no reference needed)."""
    if case.eps != 0:
        raise NotApplicable("scale_invariance needs eps = 0")
    t = materialize(case, target.device)
    k = [-3, -2, -1, 1, 2, 3][case.seed % 6]
    x2 = t.x * (2.0**k)
    # Only rows that scale exactly (no overflow, no rounding in the subnormal range) obey the law.
    exact = ((x2.to(torch.float64) * 2.0 ** (-k)) == t.x.to(torch.float64)).all(dim=-1)
    y1, _ = target.forward(t.x, t.weight, 0.0)
    y2, _ = target.forward(x2, t.weight, 0.0)
    exp = judge.expect_forward(t.x, t.weight, 0.0)
    ok = judge.row_mask(exp.stats.verifiable & tol.row_stats(x2, 0.0).verifiable & exact, t.x.shape)
    # y1 and y2 each sit within bound of the same reference, so they differ by at most 2 * bound.
    _fail([judge.compare(f"y(2^{k} x) vs y(x)", y2, y1.to(torch.float64), 2 * exp.bound_y, check=ok)], case)
    return {"unverified_rows": int((~exact).sum())}


@law()
def rows_independent(target: Target, case: Case):
    """A row's result does not depend on the other rows or on the batch it sits in."""
    if case.rows < 2:
        raise NotApplicable("rows_independent needs at least 2 rows")
    t = materialize(case, target.device)
    n = case.n
    x2 = t.x.reshape(-1, n)
    dy2 = t.grad_out.reshape(-1, n)
    gen = torch.Generator().manual_seed(case.seed + 1)
    k = 1 + int(torch.randint(case.rows, (1,), generator=gen))
    idx = torch.randperm(case.rows, generator=gen)[:k].to(target.device)
    y_full, inv_full = target.forward(t.x, t.weight, case.eps)
    sub = x2.index_select(0, idx)
    y_sub, inv_sub = target.forward(sub, t.weight, case.eps)
    exp = judge.expect_forward(sub, t.weight, case.eps)
    ok = judge.row_mask(exp.stats.verifiable, sub.shape)
    got_full = y_full.reshape(-1, n).index_select(0, idx)
    msgs = [judge.compare(f"y of rows {idx.tolist()[:8]} alone vs in the batch", y_sub, got_full.to(torch.float64),
                          2 * exp.bound_y, check=ok)]
    if target.has_backward:
        inv_f = inv_for_backward(t.x, case.eps, inv_full)
        inv_s = inv_for_backward(sub, case.eps, inv_sub)
        gx_full, _ = target.backward(t.grad_out, t.x, t.weight, inv_f)
        gx_sub, _ = target.backward(dy2.index_select(0, idx), sub, t.weight, inv_s)
        bexp = judge.expect_backward(dy2.index_select(0, idx), sub, t.weight, case.eps)
        msgs.append(judge.compare("grad_x of the rows alone vs in the batch", gx_sub,
                                  gx_full.reshape(-1, n).index_select(0, idx).to(torch.float64), 2 * bexp.bound_x,
                                  check=judge.row_mask(bexp.stats.grad_verifiable, sub.shape), strict_nonfinite=False))
    _fail(msgs, case)
    return {}


@law()
def strided_equals_contiguous(target: Target, case: Case):
    """A strided or misaligned input (x, grad_out or the weight) gives the result of its contiguous copy."""
    if case.layout == "contiguous" and case.grad_layout == "contiguous" and case.weight_layout == "contiguous":
        raise NotApplicable("strided_equals_contiguous needs a non-contiguous layout")
    t = materialize(case, target.device)
    xc = t.x.contiguous()
    wc = t.weight.clone(memory_format=torch.contiguous_format)  # a fresh block: aligned, unit stride
    what = f"the {case.layout} x" + (f" and {case.weight_layout} weight" if case.weight_layout != "contiguous" else "")
    y1, inv1 = target.forward(t.x, t.weight, case.eps)
    y2, inv2 = target.forward(xc, wc, case.eps)
    exp = judge.expect_forward(xc, wc, case.eps)
    ok = judge.row_mask(exp.stats.verifiable, xc.shape)
    msgs = [judge.compare(f"y of {what} vs their contiguous copies", y1, y2.to(torch.float64),
                          2 * exp.bound_y, check=ok)]
    if target.has_backward:
        inv_a = inv_for_backward(t.x, case.eps, inv1)
        inv_b = inv_for_backward(xc, case.eps, inv2)
        g1, w1 = target.backward(t.grad_out, t.x, t.weight, inv_a)
        g2, w2 = target.backward(t.grad_out.contiguous(), xc, wc, inv_b)
        bexp = judge.expect_backward(t.grad_out, xc, wc, case.eps)
        msgs.append(judge.compare(f"grad_x ({what}, {case.grad_layout} grad_out) vs contiguous", g1,
                                  g2.to(torch.float64), 2 * bexp.bound_x, check=judge.row_mask(bexp.stats.grad_verifiable, xc.shape),
                                  strict_nonfinite=False))
        if bool(exp.stats.verifiable.all()):
            msgs.append(judge.compare("grad_weight strided vs contiguous", w1, w2.to(torch.float64), 2 * bexp.bound_w,
                                      strict_nonfinite=False, index_names=("col",)))
    _fail(msgs, case)
    return {}


@law(optional=True)
def deterministic(target: Target, case: Case):
    """The same call twice gives bitwise the same outputs and gradients."""
    t = materialize(case, target.device)
    runs = []
    for _ in range(3):
        y, inv = target.forward(t.x, t.weight, case.eps)
        outs = [("y", y)] + ([("inv_rms", inv)] if inv is not None else [])
        if target.has_backward:
            gx, gw = target.backward(t.grad_out, t.x, t.weight, inv_for_backward(t.x, case.eps, inv))
            outs += [("grad_x", gx), ("grad_weight", gw)]
        runs.append(outs)
    msgs = []
    for i in (1, 2):
        for (name, a), (_, b) in zip(runs[0], runs[i]):
            if not _same_bits(a, b):
                diff = int((_bits(a) != _bits(b)).sum())
                msgs.append(f"{name}: call {i + 1} differs from call 1 in {diff} element(s) (not bitwise reproducible)")
    _fail(msgs, case)
    return {}



# Batch sizes where kernels switch paths: powers of two and their neighbours.
BATCH_SIZES = sorted({1, 2, 3} | {s for k in range(2, 18) for s in ((1 << k) - 1, 1 << k, (1 << k) + 1)})
BATCH_ELEMENTS = 1 << 21  # the largest batch drawn: at most this many elements


@law(optional=True)
def batch_invariant(target: Target, case: Case):
    """A row's outputs are bitwise the same alone and in batches of 1 to 2^17 rows (powers of two
    and their neighbours, up to 2^21 elements): forward (y, inv_rms) and grad_x."""
    t = materialize(case, target.device)
    why = batch_variance(target, case.n, case.torch_dtype, t.weight, case.eps, case.pattern, case.seed)
    if why:
        _fail([why], case)
    return {}


def batch_variance(target: Target, n: int, dtype: torch.dtype, weight: torch.Tensor, eps: float, pattern: str,
                   seed: int, max_elements: int = BATCH_ELEMENTS) -> str | None:
    """None when every batch of B rows (BATCH_SIZES up to max_elements) gives its rows the bits
    the next smaller batch gave them, row 0 the bits it has alone, and row B-1 the bits it has
    alone; else what differs, at the smallest such batch."""
    sizes = [s for s in BATCH_SIZES if s * n <= max_elements] or [1]
    gen = torch.Generator().manual_seed(seed)
    pool = values(pattern, (sizes[-1], n), dtype, gen).to(dtype).to(target.device)
    dy = values("normal", (sizes[-1], n), dtype, gen).to(dtype).to(target.device)

    def run(rows: slice):
        x = pool[rows]
        y, inv = target.forward(x, weight, eps)
        outs = {"y": y, "inv_rms": inv}
        if target.has_backward:
            outs["grad_x"] = target.backward(dy[rows], x, weight, inv_for_backward(x, eps, inv))[0]
        return outs

    alone_first = run(slice(0, 1))
    previous = alone_first
    for i, size in enumerate(sizes[1:], start=1):
        batch = run(slice(0, size))
        alone_last = run(slice(size - 1, size))
        prev_size = sizes[i - 1]
        for name in ("y", "inv_rms", "grad_x"):
            b = batch.get(name)
            if b is None:
                continue
            b = b.reshape(size, -1)
            # The rows this batch shares with the previous (smaller) one, then its last row alone.
            checks = ((slice(0, prev_size), previous[name].reshape(prev_size, -1), f"a batch of {prev_size}"),
                      (slice(size - 1, size), alone_last[name].reshape(1, -1), "the row alone"))
            for rows, want, what in checks:
                got = b[rows]
                if not _same_bits(got, want):
                    differ = (_bits(got) != _bits(want)).reshape(got.shape[0], -1)
                    row = rows.start + int(differ.any(-1).nonzero()[0, 0])
                    diff = int(differ.sum())
                    agree = f"; batches of {', '.join(map(str, sizes[:i]))} rows agree" if i > 1 else ""
                    return (f"{name} of row {row} differs bitwise between {what} and a batch of {size} rows "
                            f"({diff} of {got.numel()} element(s) differ; N = {n}{agree}): not batch invariant")
        previous = batch
    return None
