"""Laws of the RMSNorms people ship beside the card's (harness.judging.variant): a fused residual add, Gemma's
(1 + w), no weight, each in its own call form, with gradients through autograd; and the law of the declared
rounding order, which holds any target that declares one, the card's form too."""

from __future__ import annotations

import dataclasses
import warnings

import torch
from torch.autograd.gradcheck import GradcheckError

from harness.judging import judge, order as orders, tolerance as tol, variant as var
from harness.judging.cases import Case, materialize
from harness.judging.laws.common import POISON_FINITE, POISON_NAN, _bits, _fail, _same_bits, _untouched, poison
from harness.judging.laws.memory import OTHER_SEED
from harness.judging.contract import of_target
from harness.judging.laws.numerics import GRADCHECK_OPTS, gradcheck_plan
from harness.judging.laws.registry import law
from harness.judging.target import LawFailure, NotApplicable, Rejected, Target

# The window of the declared order: how far, in float32 units, a correct kernel's own float32 values may sit
# from the eager emulation's before the rounding to 16 bits (another reduction order, rsqrtf's error). Four
# times the most that correct kernels of each order needed over 800 drawn cases, 13,000 runs: 64 in float16,
# 256 in bfloat16 (benchmarks/results/cpu/rounding-order.txt); other orders were caught in 100% of cases of
# 256 elements or more at these widths.
ORDER_WINDOW_ULPS = {torch.float16: 256, torch.bfloat16: 1024}


def _not_in_place(v) -> str | None:
    return "an in-place fused add is for inference: it has no backward" if v.residual == "in_place" else None


def _fused_only(v) -> str | None:
    return None if v.fused else "needs a fused residual add"


def _inputs(target: Target, case: Case) -> var.Inputs:
    return var.materialize(case, target.variant, target.device, materialize(case, target.device))


def _clone(t):
    """A copy in t's own layout (sizes, strides, storage offset, and what its gaps hold) for a target that
    writes in place: Tensor.clone() makes a tensor with gaps contiguous, so an in-place target was never
    handed a padded, row_step, col_step or offset x or residual."""
    if t is None:
        return None
    if t.numel() == 0 or t.is_contiguous() or any(s < 0 or (s == 0 and n > 1) for n, s in zip(t.shape, t.stride())):
        return t.clone()  # elements sharing memory (a stride of 0) are no place to write outputs
    end = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1
    whole = t.new_empty(0).set_(t.untyped_storage(), 0, (end,), (1,))
    return whole.clone().as_strided(t.shape, t.stride(), t.storage_offset())


def _forward(target: Target, inp: var.Inputs, eps: float, case: Case, *, label: str = "",
             poison_byte: int | None = POISON_NAN) -> dict:
    """Call the variant's forward on copies where it writes in place, judge every output against the float64
    reference within its bound, and the inputs it must leave alone untouched. Returns the outputs."""
    v = target.variant
    x, r = (_clone(inp.x), _clone(inp.residual)) if v.residual == "in_place" else (inp.x, inp.residual)
    exp = var.expect_forward(v, inp.x, inp.weight, eps, inp.residual)
    if poison_byte is not None and v.residual != "in_place":
        sizes = [x.numel() * x.element_size()] + ([r.numel() * r.element_size()] if r is not None else [])
        poison(x.device, sizes, poison_byte)
    kept = {"weight": inp.weight} if inp.weight is not None else {}
    if v.residual != "in_place":
        kept.update(x=x, **({"residual": r} if r is not None else {}))
    with _untouched("forward", case, **kept):
        out = var.call(target, v, x, inp.weight, eps, r)
    _check_form(out, inp, v, target)
    rows = judge.row_mask(exp.rows_ok, inp.x.shape)
    alt_y, alt_res = var.alternatives(v, inp.x, inp.weight, eps, inp.residual)
    msgs = [judge.compare(f"{label}y", out["y"], exp.y_ref, exp.bound_y, check=rows,
                          nan_ok=judge.row_mask(exp.nonfinite, inp.x.shape), input_dtype=inp.x.dtype,
                          analysis=exp.analysis_y, alternatives=tuple(alt_y))]
    if exp.res_ref is not None:
        msgs.append(judge.compare(f"{label}residual_out (the sum)", out["residual_out"], exp.res_ref, exp.bound_res,
                                  input_dtype=out["residual_out"].dtype, alternatives=tuple(alt_res)))
    _fail(msgs, case, f"\n  variant: {v.describe()}")
    return out


def _check_form(out: dict, inp: var.Inputs, v, target: Target) -> None:
    y = out["y"]
    if tuple(y.shape) != tuple(inp.x.shape) or y.device != inp.x.device:
        raise LawFailure(f"y: expected shape {list(inp.x.shape)} on {inp.x.device}, but got {list(y.shape)} on "
                         f"{y.device}")
    if "residual_out" in out:
        ro = out["residual_out"]
        want = v.residual_torch_dtype(inp.x.dtype)
        if tuple(ro.shape) != tuple(inp.x.shape) or (ro.dtype != want and target.strict):
            raise LawFailure(f"residual_out: expected shape {list(inp.x.shape)} in {want}, but got "
                             f"{list(ro.shape)} in {ro.dtype}")


@law(form="variant")
def variant_forward_matches_reference(target: Target, case: Case):
    """A variant's outputs (y, and the sum it returns or writes in place) agree with its float64 reference,
    every layout (the residual's as x's), zero rows and inf/NaN included; the inputs it must not write,
    untouched."""
    _forward(target, _inputs(target, case), case.eps, case)
    return {}


@law(form="variant")
def variant_every_output_written(target: Target, case: Case):
    """Every output of a variant is written: its memory poisoned with NaN, then with a finite value, and the
    outputs still match the reference."""
    inp = _inputs(target, case)
    for byte, label in ((POISON_NAN, "[NaN-poisoned] "), (POISON_FINITE, "[0x42-poisoned] ")):
        _forward(target, inp, case.eps, case, label=label, poison_byte=byte)
    return {}


def _grads(target: Target, inp: var.Inputs, eps: float, *, dtype=None):
    """The target's gradients through autograd: (dict of outputs, dict of gradients) for x, the residual and
    the weight, given grad_y and (a returned sum) grad_residual_out."""
    v = target.variant
    leaves = {"x": inp.x.detach().clone().requires_grad_()}
    if inp.residual is not None:
        leaves["residual"] = inp.residual.detach().clone().requires_grad_()
    if inp.weight is not None:
        leaves["weight"] = inp.weight.detach().clone().requires_grad_()
    out = var.call(target, v, leaves["x"], leaves.get("weight"), eps, leaves.get("residual"))
    outs, gouts = [out["y"]], [inp.grad_y.to(out["y"].dtype).clone()]
    if "residual_out" in out:
        outs.append(out["residual_out"])
        gouts.append(inp.grad_residual.to(out["residual_out"].dtype).clone())
    if not any(o.requires_grad for o in outs):
        raise LawFailure("the forward's outputs carry no gradient: a variant target is differentiated through its "
                         "forward (autograd), so its forward must be differentiable")
    handed = [g.clone() for g in gouts]
    names = list(leaves)
    got = torch.autograd.grad(outs, [leaves[n] for n in names], gouts, allow_unused=True)
    # Autograd hands one gradient tensor to every consumer of an output (y added to a residual passes its
    # gradient to both): a backward that writes into it gives the others its own result (Liger-Kernel #370).
    overwritten = [f"grad_{k}: the backward wrote into the gradient autograd handed it for {k} "
                   f"({int((_bits(g) != _bits(h)).sum())} of {g.numel()} element(s) changed); autograd hands that "
                   "same tensor to every other consumer of the output, which then reads the backward's result"
                   for k, g, h in zip(("y", "residual_out"), gouts, handed) if not _same_bits(g, h)]
    return out, dict(zip(names, got)), overwritten


def _reference_grads(v, inp: var.Inputs, eps: float, *, grad_y=None, grad_residual=None) -> dict:
    """float64 gradients of the variant's reference, for the same grad_y and grad_residual_out (or those given:
    the diagnosis' alternatives)."""
    grad_y = inp.grad_y if grad_y is None else grad_y
    grad_residual = inp.grad_residual if grad_residual is None else grad_residual
    leaves = {"x": inp.x.detach().to(torch.float64).requires_grad_()}
    if inp.residual is not None:
        leaves["residual"] = inp.residual.detach().to(torch.float64).requires_grad_()
    if inp.weight is not None:
        leaves["weight"] = inp.weight.detach().to(torch.float64).requires_grad_()
    rdt = v.residual_torch_dtype(inp.x.dtype) if v.fused else None
    y, ro = orders.reference64(leaves["x"], leaves.get("weight"), eps, order=v.order or "multiply_in_float32",
                               weight_offset=v.weight_offset, residual=leaves.get("residual"), sum_in=v.sum,
                               residual_dtype=rdt, has_weight=v.weight)
    outs, gouts = [y], [grad_y.to(torch.float64)]
    if ro is not None and v.residual == "returned":
        outs.append(ro)
        gouts.append(grad_residual.to(torch.float64))
    names = list(leaves)
    got = torch.autograd.grad(outs, [leaves[n] for n in names], gouts, allow_unused=True)
    return {n: (g if g is not None else torch.zeros_like(leaves[n])) for n, g in zip(names, got)}


def _backward_alternatives(v, inp: var.Inputs, eps: float) -> dict:
    """The diagnosis of wrong gradients of a returned sum: for x and the residual, (the bug class, what the
    gradient would be under it) pairs."""
    if v.residual != "returned":
        return {}
    g64 = inp.grad_residual.to(torch.float64)
    grouped = _reference_grads(v, inp, eps, grad_y=inp.grad_y.to(torch.float64) + g64, grad_residual=g64 * 0)
    dropped = _reference_grads(v, inp, eps, grad_residual=g64 * 0)
    return {k: ((f"grad_{k} is (grad_residual_out + grad_y) passed through the norm's backward: the prenorm gradient "
                 "grouped as (dres + dout) * dnorm, not dres + dout * dnorm (the returned sum's gradient must be added "
                 "after the norm's backward)", grouped[k]),
                (f"grad_{k} leaves out grad_residual_out: the gradient of the returned sum was dropped", dropped[k]))
            for k in ("x", "residual")}


def _eager_grads(v, inp: var.Inputs, eps: float) -> list[dict]:
    """The gradients of each eager computation the variant may follow (autograd through var.eager, in the
    dtypes)."""
    out = []
    for o in var.eager_orders(v):
        leaves = {"x": inp.x.detach().clone().requires_grad_()}
        if inp.residual is not None:
            leaves["residual"] = inp.residual.detach().clone().requires_grad_()
        if inp.weight is not None:
            leaves["weight"] = inp.weight.detach().clone().requires_grad_()
        y, ro = var.eager(v, leaves["x"], leaves.get("weight"), eps, leaves.get("residual"), o)
        outs, gouts = [y], [inp.grad_y.to(y.dtype)]
        if ro is not None and v.residual == "returned":
            outs.append(ro)
            gouts.append(inp.grad_residual.to(ro.dtype))
        names = list(leaves)
        got = torch.autograd.grad(outs, [leaves[n] for n in names], gouts, allow_unused=True)
        out.append({n: g for n, g in zip(names, got) if g is not None})
    return out


@law(form="variant", when=_not_in_place)
def variant_backward_matches_reference(target: Target, case: Case):
    """A variant's gradients through autograd (x's, the residual's, the weight's) agree with its float64
    reference: the returned sum's gradient added to the norm's (dres + dout * dnorm, not (dres + dout) *
    dnorm), the offset's weight gradient that of x_hat."""
    v = target.variant
    inp = _inputs(target, case)
    _, got, overwritten = _grads(target, inp, case.eps)
    ref = _reference_grads(v, inp, case.eps)
    alts = _backward_alternatives(v, inp, case.eps)
    eagers = _eager_grads(v, inp, case.eps)
    s = var.normalised_input(v, inp.x, inp.residual)
    stats = tol.row_stats(s, case.eps)
    w_eff = var.effective_weight(v, inp.weight, case.n, inp.x.device)
    gy = inp.grad_y.to(torch.float64)
    gw_dtype = inp.weight.dtype if inp.weight is not None else torch.float32
    bx, bw = tol.backward_bounds(gy, s, w_eff, stats, stats.d_inv, ref["x"], ref.get("weight", torch.zeros(case.n,
                                 dtype=torch.float64)), gw_dtype)
    # The returned sum's gradient is added in, then rounded to each input's own dtype: a float32 residual
    # stream's gradient is held to float32, not to x's 16 bits.
    bres = bx
    if v.residual == "returned":
        gres = inp.grad_residual.to(torch.float64).abs()
        bres = bx + (gres + ref["residual"].abs()) * tol.unit_roundoff(inp.residual.dtype)
        bx = bx + (gres + ref["x"].abs()) * tol.unit_roundoff(inp.x.dtype)
    rows = judge.row_mask(stats.grad_verifiable, inp.x.shape)
    msgs = list(overwritten)
    for name in got:
        g = got[name]
        if g is None:
            msgs.append(judge.Mismatch(name, [f"grad_{name}: no gradient reached {name} through the forward"]))
            continue
        bound = {"weight": bw, "residual": bres}.get(name, bx)
        if name == "residual" and v.residual != "returned":
            bound = bound + ref["residual"].abs() * tol.unit_roundoff(inp.residual.dtype)
        analysis = bound
        for e in eagers:
            if name in e:
                bound = torch.maximum(bound, judge._eager_widened(
                    analysis, e[name], ref[name], rows if name != "weight" else torch.ones_like(ref[name], dtype=torch.bool),
                    rowwise=name != "weight"))
        if name == "weight" and not bool(stats.verifiable.all()):
            continue  # grad_weight sums every row: compared only when every row is
        # A row statistic that is off moves each gradient by the norm's terms (of s = x + residual).
        span = judge.grad_weight_span(gy, s, stats.inv) if name == "weight" else judge.grad_x_span(
            gy, s, w_eff, "x + residual" if v.residual != "none" else "x")
        msgs.append(judge.compare(f"grad_{name}", g, ref[name], bound, check=rows if name != "weight" else None,
                                  strict_nonfinite=False, nan_ok=judge.row_mask(~stats.finite, inp.x.shape)
                                  if name != "weight" else torch.full_like(ref[name], bool((~stats.finite).any()),
                                                                           dtype=torch.bool),
                                  index_names=("col",) if name == "weight" else ("row", "col"),
                                  input_dtype=inp.x.dtype, analysis=analysis, alternatives=alts.get(name, ()),
                                  row_span=span))
    _fail(msgs, case, f"\n  variant: {v.describe()}")
    return {}


@law(form="variant", when=_not_in_place)
def variant_gradcheck(target: Target, case: Case):
    """torch.autograd.gradcheck of every output a variant returns (y, and the sum it returns) with respect to
    x, the residual and the weight, in float64 where the target takes it, else float32, or under a declared
    contract in its widest dtype (numerics.gradcheck_plan)."""
    v = target.variant
    # Never a dtype outside a declared contract: a correct Gemma fused add declared float32 at most, which
    # computes float64 input in float32 as HF's code does, failed here in float64 (0.24 against 3.1e-6).
    attempts, fall_back = gradcheck_plan(target, of_target(target.module, target.spec))
    gen = torch.Generator().manual_seed(case.seed)
    rows, n = max(1, min(case.rows, 3)), max(1, min(case.n, 8))
    mag = lambda: (0.5 + torch.rand(rows, n, generator=gen, dtype=torch.float64)) * torch.where(  # noqa: E731
        torch.rand(rows, n, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
    x0, r0, w0 = mag(), mag(), torch.randn(n, generator=gen, dtype=torch.float64)
    eps = max(case.eps, 1e-6)
    last = None
    for dt, wdt in attempts:
        leaves = [x0.to(dt).to(target.device).requires_grad_()]
        if v.fused:
            leaves.append(r0.to(v.residual_torch_dtype(dt)).to(target.device).requires_grad_())
        if v.weight:
            leaves.append(w0.to(wdt).to(target.device).requires_grad_())

        def fn(*ts):
            x = ts[0]
            r = ts[1] if v.fused else None
            w = ts[-1] if v.weight else None
            out = var.call(target, v, x, w, eps, r)
            return (out["y"], out["residual_out"]) if "residual_out" in out else out["y"]

        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Input #", category=UserWarning)
                torch.autograd.gradcheck(fn, tuple(leaves), nondet_tol=0.0, **GRADCHECK_OPTS[dt])
            return {"gradcheck_dtype": str(dt).replace("torch.", "")}
        except GradcheckError as e:
            raise LawFailure(f"gradcheck ({dt}) of the variant ({v.describe()}) failed for x of shape {[rows, n]}, "
                             f"eps={eps}:\n{e}") from None
        except Rejected as e:
            if not fall_back:
                raise
            last = e
    raise last


@law(form="variant")
def variant_outputs_kept(target: Target, case: Case):
    """Two calls on other inputs of the same shapes: each right, and the first call's outputs keep their bits
    while the second runs (a buffer kept by shape hands one layer's values to another)."""
    v = target.variant
    one = _inputs(target, case)
    two = _inputs(target, dataclasses.replace(case, seed=case.seed ^ OTHER_SEED))
    out1 = _forward(target, one, case.eps, case, label="[call 1] ")
    copies = {k: t.detach().clone() for k, t in out1.items()}
    _forward(target, two, case.eps, case, label="[call 2, after call 1] ")
    msgs = []
    for k, t in out1.items():
        if not _same_bits(t, copies[k]):
            diff = int((_bits(t) != _bits(copies[k])).sum())
            msgs.append(f"call 1's {k} changed during call 2: {diff} of {t.numel()} element(s) differ from what "
                        "call 1 gave (the target writes again into memory it handed out)")
    _fail(msgs, case, f"\n  variant: {v.describe()}")
    return {}


@law(form="variant", when=lambda v: None if v.fused or v.weight else
     "this variant takes no input a caller could get wrong beyond the card's (no weight, no residual)")
def variant_bad_inputs_raise(target: Target, case: Case):
    """A variant refuses what no caller may pass, with an error, and works after: a residual of another shape
    or dtype than its stream's, an offset weight of the wrong length; then a valid call is still right."""
    v = target.variant
    inp = _inputs(target, case)
    bad = []
    if v.fused:
        bad.append(("residual_shape", (inp.x, inp.weight, case.eps, inp.residual.reshape(-1)[:-1]
                                       if inp.residual.numel() > 1 else torch.ones(3, dtype=inp.residual.dtype))))
        other = torch.float16 if inp.residual.dtype == torch.bfloat16 else torch.bfloat16
        bad.append(("residual_dtype", (inp.x, inp.weight, case.eps, inp.residual.to(other))))
    if v.weight:
        w = inp.weight
        bad.append(("weight_longer", (inp.x, torch.ones(case.n + 1, dtype=w.dtype, device=w.device), case.eps)
                    + ((inp.residual,) if v.fused else ())))
    raised = 0
    for kind, args in bad:
        args = tuple(a.clone() if isinstance(a, torch.Tensor) and v.residual == "in_place" else a for a in args)
        try:
            target.call(f"forward with bad input {kind}", target.module.forward, *args)
        except Rejected:
            raised += 1
            continue
        if kind != "residual_dtype" and target.strict:
            raise LawFailure(f"forward accepted a bad input ({kind}) without raising; expected a clear error"
                             f"\n  case: {case.short()}")
    _forward(target, inp, case.eps, case, label="[after bad inputs] ")
    return {"bad_inputs": len(bad), "raised": raised}


@law(form="variant", when=lambda v: _fused_only(v) or (
     "a float32 residual stream beside x of another dtype cannot share its memory" if v.residual_dtype == "float32"
     else None))
def variant_aliased_residual(target: Target, case: Case):
    """A residual that is x itself, or overlaps it: an in-place fused add must refuse it (both outputs would
    land in one buffer); a returned one must refuse it or give the declared result, its inputs untouched."""
    v = target.variant
    inp = _inputs(target, case)
    shape = tuple(inp.x.shape)
    for what in ("the same tensor as x", "a view of x's memory one element on (they overlap)"):
        store = torch.empty(inp.x.numel() + 1, dtype=inp.x.dtype, device=inp.x.device)
        store[: inp.x.numel()] = inp.x.reshape(-1)
        store[-1] = inp.x.reshape(-1)[-1]
        x = store[: inp.x.numel()].view(shape)
        r = x if what.startswith("the same") else store[1:].view(shape)
        values = (x.clone(), r.clone())
        try:
            out = var.call(target, v, x, inp.weight, case.eps, r)
        except Rejected:
            continue
        if v.residual == "in_place":
            raise LawFailure(f"an in-place fused add took a residual that is {what} and wrote both outputs into "
                             f"memory they share; expected a clear error\n  case: {case.short()}")
        exp = var.expect_forward(v, values[0], inp.weight, case.eps, values[1])
        # Rows whose statistics leave float32's range (a zero sum with an eps float32 flushes) have no one
        # right answer: left out here as variant_forward_matches_reference leaves them out.
        msgs = [judge.compare(f"[residual {what}] y", out["y"], exp.y_ref, exp.bound_y,
                              check=judge.row_mask(exp.rows_ok, shape), nan_ok=judge.row_mask(exp.nonfinite, shape),
                              input_dtype=inp.x.dtype),
                judge.compare(f"[residual {what}] residual_out", out["residual_out"], exp.res_ref, exp.bound_res)]
        if not torch.equal(_bits(x), _bits(values[0])):
            msgs.append(f"[residual {what}] x changed during the call: the target wrote through the alias")
        _fail(msgs, case, f"\n  variant: {v.describe()}")
    return {}


# The bound of variant_two_layers: TWO_LAYER_K roundings of the widest input dtype's unit, of the gradient plus
# the terms its two backwards round (_two_layers). Over 2,500 drawn cases a target (up to 4,096 elements, the
# most the law draws; every dtype, eps and weight dtype), three correct fused adds in torch ops (both sums, both
# stream dtypes: tests/targets/variants/) needed at most 2.8 of them, and three of this project's fused forms
# (examples/project_variants/) 2.4; the prenorm grouping bug (tests/targets/variants/bug_prenorm_grouping.py)
# was 16 or more off in 605 of 612 bfloat16 cases and 68 or more in every float16, float32 and float64 one.
TWO_LAYER_K = 8


def _two_layers(target: Target, case: Case) -> list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Two fused norms in a row as a decoder runs them, through autograd: (name, the target's gradient, the
    float64 chain's, the bound) for x, the residual and the weight."""
    v = target.variant
    one = _inputs(target, case)
    two = _inputs(target, dataclasses.replace(case, seed=case.seed ^ OTHER_SEED))
    rdt = v.residual_torch_dtype(one.x.dtype)
    f64 = torch.float64

    def target_call(x, r, w):
        out = var.call(target, v, x, w, case.eps, r)
        return out["y"], out["residual_out"]

    def ref_call(x, r, w):
        return orders.reference64(x, w, case.eps, order=v.order or "multiply_in_float32", weight_offset=v.weight_offset,
                                  residual=r, sum_in=v.sum, residual_dtype=rdt if rdt != f64 else None,
                                  has_weight=v.weight)

    def at(ref, got):
        # The float64 chain carries its own gradients but takes the target's values between the layers: y and
        # the sum are stored in their dtypes there, and where the second layer's sum cancels (x + residual near
        # 0) a rounding of the stream moves its gradient by far more than a rounding (seen: float32, N = 1, a
        # gradient of 63 off by 7e-5 of itself; bfloat16, a sum rounded to 0, grad_weight -119.5 against 0.46).
        return ref + (got.detach().to(f64) - ref).detach()

    leaves = [one.x.detach().clone().requires_grad_(), one.residual.detach().clone().requires_grad_()]
    w = one.weight.detach().clone().requires_grad_() if one.weight is not None else None
    y1, r1 = target_call(leaves[0], leaves[1], w)
    in2 = y1 * 0.5 + two.x.to(y1.dtype)
    y2, r2 = target_call(in2, r1, w)
    gy, gres = one.grad_y, one.grad_residual
    grads = torch.autograd.grad([y2, r2], leaves + ([w] if w is not None else []),
                                [gy.to(y2.dtype), gres.to(r2.dtype)], allow_unused=True)
    l64 = [one.x.detach().to(f64).requires_grad_(), one.residual.detach().to(f64).requires_grad_()]
    w64 = one.weight.detach().to(f64).requires_grad_() if one.weight is not None else None
    y1r, r1r = ref_call(l64[0], l64[1], w64)
    y2r, r2r = ref_call(at(y1r * 0.5 + two.x.to(f64), in2), at(r1r, r1), w64)
    ref = torch.autograd.grad([y2r, r2r], l64 + ([w64] if w64 is not None else []),
                              [gy.to(f64), gres.to(f64)], allow_unused=True)

    # The size of the terms each layer's backward rounds, per row (a gradient can be far smaller than the
    # terms it is the difference of: a row of one element, whose gradient is eps-sized, is one):
    #   layer 2: inv2 |w| |grad_y| and grad_residual;  |grad_s2| <= M2 = 2 inv2 |w| |grad_y| + |grad_residual|
    #   layer 1: inv1 |w| M2, and layer 2's error passed on through the residual and, times inv1 |w|, through y1
    # grad_weight sums |grad_y| |x_hat2| + M2 |x_hat1| over the rows.
    with torch.no_grad():
        s1 = var.normalised_input(v, one.x, one.residual).to(f64)
        s2 = var.normalised_input(v, in2.detach(), r1.detach()).to(f64)
        inv1, inv2 = ((s.pow(2).mean(-1, keepdim=True) + case.eps).rsqrt() for s in (s1, s2))
        wmax = var.effective_weight(v, one.weight, case.n, one.x.device).abs().amax()
        g_row = gy.to(f64).abs().amax(-1, keepdim=True)
        m2 = 2 * inv2 * wmax * g_row + gres.to(f64).abs().amax(-1, keepdim=True)
        terms_s = inv2 * wmax * g_row + m2 + inv1 * wmax * m2
        terms_w = (gy.to(f64).abs() * (s2 * inv2).abs() + m2 * (s1 * inv1).abs()).reshape(-1, case.n).sum(0)
    u = max(tol.unit_roundoff(t.dtype) for t in (one.x, one.residual) + ((one.weight,) if w is not None else ()))
    out = []
    for name, g, r_ in zip(("x", "residual", "weight"), grads, ref):
        if g is None or r_ is None:
            continue
        terms = terms_w if name == "weight" else terms_s
        bound = TWO_LAYER_K * u * (r_.abs() + terms) + torch.finfo(torch.float32).tiny
        out.append((name, g, r_, bound))
    return out


@law(form="variant", when=lambda v: _fused_only(v) or _not_in_place(v))
def variant_two_layers(target: Target, case: Case):
    """Two fused norms in a row, the residual carried from the first to the second, through autograd as a
    decoder runs them: every gradient agrees with the float64 chain taken through the values the target hands
    from one layer to the next (a backward that overwrote the grad_out the residual between them still needs
    once broke this, and so did one that grouped the prenorm gradient)."""
    msgs = []
    for name, g, r_, bound in _two_layers(target, case):
        if not bool(torch.isfinite(r_).all()):
            continue
        msgs.append(judge.compare(f"[two layers] grad_{name}", g, r_, bound, strict_nonfinite=False,
                                  index_names=("col",) if name == "weight" else ("row", "col")))
    _fail(msgs, case, f"\n  variant: {target.variant.describe()}")
    return {}


@law(form="any", when=lambda v: None if v.order in ("cast_then_multiply", "multiply_in_float32") else
     "needs a declared rounding order with a window (cast_then_multiply or multiply_in_float32)")
def follows_declared_order(target: Target, case: Case):
    """A 16-bit y (and a stored sum) is, element for element, what the declared rounding order gives, within
    the room a correct kernel's float32 arithmetic takes: one or two roundings on a tie, never another order's
    rounding. A kernel that multiplies in float32 where it declared cast-then-multiply fails, named."""
    v = target.variant
    if case.torch_dtype not in ORDER_WINDOW_ULPS:
        # The order is where a 16-bit y is rounded; float32 and float64 outputs have no such rounding to judge.
        raise NotApplicable(f"the declared order shapes a 16-bit y only, not {case.dtype}")
    inp = _inputs(target, case)
    x, r = (_clone(inp.x), _clone(inp.residual)) if v.residual == "in_place" else (inp.x, inp.residual)
    if v.plain:
        y, _ = target.forward(x, inp.weight, case.eps)
        out = {"y": y}
    else:
        out = var.call(target, v, x, inp.weight, case.eps, r)
    # A wider y (HF's float32 weight promotes the product) is judged as an op in x's dtype would store it.
    y = out["y"].to(inp.x.dtype)
    rdt = v.residual_torch_dtype(inp.x.dtype) if v.fused else None
    kw = dict(weight_offset=v.weight_offset, residual=inp.residual, residual_dtype=rdt, has_weight=v.weight)
    if v.fused:
        kw["sum_in"] = v.sum
    dt = inp.x.dtype
    rel = ORDER_WINDOW_ULPS[dt] * 2.0 ** -24
    # Rows whose statistics leave float32's range (a zero sum beside an eps that float32 flushes) have no one
    # right answer in float32: a kernel in float64 gives 0 where the order's float32 emulation gives NaN.
    s_in = var.normalised_input(v, inp.x, inp.residual)
    rows_ok = (torch.isfinite(inp.x.to(torch.float64)).all(-1) & torch.isfinite(s_in.to(torch.float64)).all(-1)
               & tol.row_stats(s_in, case.eps).verifiable.reshape(inp.x.shape[:-1]))
    window = orders.order_window(inp.x, inp.weight, case.eps, order=v.order, rel=rel, **kw)
    lo, hi, nan = (t[rows_ok] if t.dim() else t for t in window)
    misses = orders.window_misses(y.detach()[rows_ok].cpu() if y.is_cuda else y.detach()[rows_ok], (lo.cpu(), hi.cpu(),
                                                                                                   nan.cpu()))
    if not misses:
        return {}
    ranked = orders.closest_order(y.detach().cpu(), inp.x.cpu(), inp.weight.cpu() if inp.weight is not None else None,
                                  case.eps, weight_offset=v.weight_offset,
                                  residual=inp.residual.cpu() if inp.residual is not None else None,
                                  residual_dtype=rdt, has_weight=v.weight, rel=rel)
    fits = [" ".join(name) for name, d in ranked["ranked"] if d.get("window_misses") == 0]
    best = ranked["ranked"][0]
    looks = (f"it lies wholly inside the window of {', '.join(fits)}" if fits else
             f"no declared order fits; the nearest is {' '.join(best[0])} ({best[1]['differ']} elements off it)")
    if v.weight_offset and inp.weight.dtype in ORDER_WINDOW_ULPS:
        # Gemma's 1 + w added in the weight's 16-bit dtype, then promoted (Liger-Kernel #1462): the declared
        # order's window with that rounded weight and no offset.
        rounded = inp.weight + v.weight_offset
        kw_r = dict(kw, weight_offset=0.0)
        if orders.window_misses(y.detach()[rows_ok].cpu(), tuple(t[rows_ok].cpu() if t.dim() else t.cpu() for t in
                                orders.order_window(inp.x, rounded, case.eps, order=v.order, rel=rel, **kw_r))) == 0:
            wdt = str(inp.weight.dtype).replace("torch.", "")
            looks = (f"it lies wholly inside the window of {v.order} with 1 + w rounded to the weight's {wdt} first: "
                     f"the offset was added in the weight's dtype before the promotion (1 + w must be added in "
                     f"float32)")
    raise LawFailure(f"y: {misses} of {int(rows_ok.sum()) * case.n} elements lie outside the window of the declared "
                     f"order {v.order} (each float32 value before the rounding moved by up to "
                     f"{ORDER_WINDOW_ULPS[dt]} float32 units); diagnosis: {looks}"
                     f"\n  variant: {v.describe()}\n  case: {case.short()}")
