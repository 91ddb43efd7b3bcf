"""The RMSNorms people ship beside the card's: a fused residual add (the sum returned, or written in place),
Gemma's (1 + w), no weight; and the rounding order of the 16-bit output. A target declares its variant in
its contract (harness.judging.contract); this module turns a case into the variant's inputs, calls the
target in the variant's call form, and says what it must give: the float64 reference and the bound of each
output and gradient.

The call form of a variant target (a module's forward; its backward is autograd's, through that forward):

    forward(x, weight, eps[, residual])   weight None without a weight; residual only with a fused add
      residual "none"      returns y (or (y, inv_rms))
      residual "returned"  returns (y, residual_out): residual_out = x + residual, the prenorm sum (Liger's
                           LigerFusedAddRMSNorm, flash-attn's prenorm=True, quack's residual=)
      residual "in_place"  writes y into x and the sum into residual (vLLM's fused_add_rms_norm, FlashInfer's
                           fused_add_rmsnorm); what it returns is not read; inference only (no backward)

y = s / sqrt(mean(s^2) + eps) * (weight_offset + w), s = x + residual (x alone without one). The sum that is
normalised is the float32 one ("float32": vLLM's native path, FlashInfer, flash-attn, quack) or the one
stored in the residual's dtype ("stored": HF's eager layers, Liger); residual_out is stored in the
residual's dtype, or in float32 ("residual_dtype": "float32", flash-attn's residual_in_fp32). The offset is
added in float32 after promoting w (Gemma), never w + 1 in bfloat16.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from harness.judging import judge, order as orders, tolerance as tol
from harness.judging.cases import Case, place, values
from harness.judging.target import LawFailure

RESIDUAL_FORMS = ("none", "returned", "in_place")
SUMS = orders.SUMS
ORDERS = orders.ORDERS
KEYS = ("residual", "residual_dtype", "sum", "weight_offset", "weight", "order")
RESIDUAL_SEED = 0x4E51  # the residual's values and its gradient: drawn from the case's seed, apart from x's
UNIT_FLOAT32 = 2.0 ** -24


@dataclass(frozen=True)
class Variant:
    residual: str = "none"  # RESIDUAL_FORMS ("prenorm" is read as "returned")
    residual_dtype: str = "x"  # the residual stream's dtype: x's, or float32
    sum: str = "float32"  # which sum is normalised: the float32 one, or the one stored in the residual's dtype
    weight_offset: float = 0.0  # 1.0: Gemma's (1 + w)
    weight: bool = True  # False: no weight (torch.nn.RMSNorm(elementwise_affine=False), QK-norms)
    order: str | None = None  # the rounding order of a 16-bit y (ORDERS), when declared

    @classmethod
    def from_dict(cls, d: dict, source: str) -> "Variant":
        """The variant keys of a declaration, validated; ValueError naming the key, what was expected and
        given, or the two keys that contradict each other."""
        residual = d.get("residual", "none")
        residual = "returned" if residual == "prenorm" else residual
        if residual not in RESIDUAL_FORMS:
            raise ValueError(f"contract ({source}): expected residual from {RESIDUAL_FORMS + ('prenorm',)}, but got "
                             f"{residual!r}")
        rdt = d.get("residual_dtype", "x")
        if rdt not in ("x", "float32"):
            raise ValueError(f"contract ({source}): expected residual_dtype 'x' or 'float32', but got {rdt!r}")
        sum_ = d.get("sum", "float32")
        if sum_ not in SUMS:
            raise ValueError(f"contract ({source}): expected sum from {SUMS}, but got {sum_!r}")
        if residual == "none" and ("sum" in d or "residual_dtype" in d):
            raise ValueError(f"contract ({source}): sum and residual_dtype describe a fused residual add, but "
                             "residual is 'none'; declare residual 'returned' or 'in_place', or drop them")
        offset = d.get("weight_offset", 0.0)
        if isinstance(offset, bool) or not isinstance(offset, (int, float)) or float(offset) not in (0.0, 1.0):
            raise ValueError(f"contract ({source}): expected weight_offset 0 or 1, but got {offset!r}")
        weight = d.get("weight", True)
        if not isinstance(weight, bool):
            raise ValueError(f"contract ({source}): expected weight to be true or false, but got {weight!r}")
        if not weight and float(offset) != 0.0:
            raise ValueError(f"contract ({source}): weight_offset {offset} needs a weight, but weight is false")
        order = d.get("order")
        if order is not None and order not in ORDERS:
            raise ValueError(f"contract ({source}): expected order from {ORDERS}, but got {order!r}")
        if order == "all_in_dtype" and residual != "none" and (sum_ != "stored" or rdt != "x"):
            raise ValueError(f"contract ({source}): order all_in_dtype with a fused add sums in x's dtype (Liger's "
                             "fused add): expected sum 'stored' and residual_dtype 'x'")
        return cls(residual, rdt, sum_, float(offset), weight, order)

    def to_dict(self) -> dict:
        """The keys that differ from the card's form (what a declaration of this variant says)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v != getattr(Variant(), k)}

    @property
    def plain(self) -> bool:
        """The card's call form: forward(x, weight, eps), backward(grad_out, x, weight, inv_rms)."""
        return self.residual == "none" and self.weight_offset == 0.0 and self.weight

    @property
    def fused(self) -> bool:
        return self.residual != "none"

    def describe(self) -> str:
        parts = []
        if self.fused:
            parts.append(f"fused residual add, {self.residual} ({self.sum} sum normalised, residual stream in "
                         f"{'float32' if self.residual_dtype == 'float32' else 'x dtype'})")
        if self.weight_offset:
            parts.append("weight (1 + w)")
        if not self.weight:
            parts.append("no weight")
        if self.order:
            parts.append(f"order {self.order}")
        return "; ".join(parts) or "the card's form"

    def residual_torch_dtype(self, x_dtype: torch.dtype) -> torch.dtype:
        return torch.float32 if self.residual_dtype == "float32" and x_dtype != torch.float64 else x_dtype


@dataclass
class Inputs:
    """A variant case's tensors: x, weight (None without one), residual (None without a fused add), and the
    gradients of y and of the sum a backward is handed."""

    x: torch.Tensor
    weight: torch.Tensor | None
    residual: torch.Tensor | None
    grad_y: torch.Tensor
    grad_residual: torch.Tensor | None


def materialize(case: Case, variant: Variant, device, tensors) -> Inputs:
    """The variant's inputs for case, bit-identical on every machine: x, the weight and grad_out as the card's
    (tensors: harness.judging.cases.materialize's), the residual and its gradient drawn from the case's seed
    apart from them, the residual in x's layout."""
    residual = grad_residual = None
    if variant.fused:
        gen = torch.Generator().manual_seed(case.seed ^ RESIDUAL_SEED)
        rdt = variant.residual_torch_dtype(case.torch_dtype)
        rv = values("normal" if case.pattern in ("nonfinite", "zero_rows") else case.pattern, case.shape, rdt,
                    gen).to(rdt)
        residual = place(rv, case.layout if case.layout != "broadcast" else "contiguous", device, gen)
        gv = values("normal", case.shape, rdt, gen).to(rdt)
        grad_residual = place(gv, "contiguous", device, gen)
    return Inputs(tensors.x, tensors.weight if variant.weight else None, residual, tensors.grad_out, grad_residual)


def reference(variant: Variant, x, weight, eps, residual) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(y, residual_out or None) in float64: what the variant's outputs approximate."""
    rdt = variant.residual_torch_dtype(x.dtype) if variant.fused else None
    return orders.reference64(x, weight, eps, order=variant.order or "multiply_in_float32",
                              weight_offset=variant.weight_offset, residual=residual, sum_in=variant.sum,
                              residual_dtype=rdt, has_weight=variant.weight)


def eager(variant: Variant, x, weight, eps, residual, order: str):
    """(y, residual_out or None): eager torch in the given order, differentiable. In float64 it stays in float64
    (orders.emulate upcasts to float32 and no further, as HF's code does: its error is the float32 one, and a
    float64 kernel granted it would pass computed in float32)."""
    rdt = variant.residual_torch_dtype(x.dtype) if variant.fused else None
    if x.dtype != torch.float64:
        return orders.emulate(x, weight, eps, order=order, weight_offset=variant.weight_offset, residual=residual,
                              sum_in=variant.sum, residual_dtype=rdt, has_weight=variant.weight)
    s = x if residual is None else x + residual.to(torch.float64)
    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps)
    if variant.weight:
        y = y * (weight.to(torch.float64) + variant.weight_offset)
    return y, (None if residual is None else s)


def eager_orders(variant: Variant) -> list[str]:
    """The orders a correct kernel may be held against: the declared one, or where none is declared the two
    orders libraries ship (cast then multiply; multiply in float32)."""
    out = [variant.order] if variant.order else ["cast_then_multiply", "multiply_in_float32"]
    return [o for o in out if not (o == "all_in_dtype" and variant.fused and variant.sum != "stored")]


def emulations(variant: Variant, x, weight, eps, residual) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """The eager computations a correct kernel may be held against (eager_orders), as eager() computes them."""
    return [eager(variant, x, weight, eps, residual, o) for o in eager_orders(variant)]


def alternatives(variant: Variant, x, weight, eps, residual) -> tuple[list, list]:
    """The diagnosis of a wrong forward: (for y, for residual_out) lists of (the bug class, in words; what the
    output would be under it, float64), each a bug that shipped in a library's fused add or (1 + w)
    (docs/variants.md). judge.compare names the first that explains the wrong elements."""
    ys: list = []
    res: list = []

    def ref(**kw):
        v = dataclasses.replace(variant, **{k: kw.pop(k) for k in list(kw) if k in ("weight_offset", "sum")})
        return reference(v, kw.get("x", x), kw.get("weight", weight), eps, kw.get("residual", residual))

    if variant.weight and variant.weight_offset:
        off = variant.weight_offset
        ys.append((f"y is what (1 + w) gives with the offset applied twice ({2 * off:g} + w): the offset added "
                   "again where it was already in the weight", ref(weight_offset=2 * off)[0]))
        ys.append(("y is what w alone gives: the offset (1 + w) left out of the forward", ref(weight_offset=0.0)[0]))
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        if tol.unit_roundoff(weight.dtype) > tol.unit_roundoff(acc):  # a weight narrower than the arithmetic
            rounded = (weight + off).to(torch.float64)  # 1 + w computed, and rounded, in the weight's own dtype
            ys.append((f"y is what 1 + w rounded to the weight's {str(weight.dtype).replace('torch.', '')} gives: the "
                       "offset added in the weight's dtype before the promotion (1 + w must be added in float32)",
                       ref(weight=rounded, weight_offset=0.0)[0]))
    if variant.fused:
        y2, r2 = ref(residual=residual * 2)
        ys.append(("y is the norm of x + 2 residual: the residual added twice", y2))
        res.append(("residual_out is x + 2 residual: the residual added twice", r2))
        ys.append(("y is the norm of x alone: the residual left out of the sum that is normalised",
                   reference(dataclasses.replace(variant, residual="none", sum="float32", residual_dtype="x"), x,
                             weight, eps, None)[0]))
        copied = ""
        if variant.residual == "in_place":
            strided = " and ".join(n for n, t in (("x", x), ("the residual", residual)) if not t.is_contiguous())
            if strided:
                copied = f" ({strided} strided here: written into a contiguous copy instead of the caller's memory?)"
            ys.append(("y holds x as it was passed in: the normalised result was never written into x" + copied,
                       x.detach().to(torch.float64)))
        res.append(("residual_out holds the residual as it was passed in: the sum was never written back" + copied,
                    residual.detach().to(torch.float64)))
        if x.dtype in (torch.float16, torch.bfloat16) and variant.order != "all_in_dtype":
            other = "stored" if variant.sum == "float32" else "float32"
            said = {"stored": "the sum rounded to the residual's dtype", "float32": "the float32 sum"}
            ys.append((f"y is the norm of {said[other]} (sum {other!r}), not of {said[variant.sum]} that the contract "
                       f"declares (sum {variant.sum!r})", ref(sum=other)[0]))
            if variant.residual_torch_dtype(x.dtype) == torch.float32:
                res.append((f"residual_out is the sum rounded to x's {str(x.dtype).replace('torch.', '')}: the float32 "
                            "residual stream declared (residual_dtype float32) was rounded to x's dtype",
                            (x.to(torch.float32) + residual.to(torch.float32)).to(x.dtype).to(torch.float64)))
    return ys, res


def normalised_input(variant: Variant, x, residual) -> torch.Tensor:
    """The tensor the variant normalises, as its statistics see it (the float32 sum, or the stored one)."""
    if residual is None:
        return x
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    if variant.sum == "float32":
        return x.to(acc) + residual.to(acc)
    rdt = variant.residual_torch_dtype(x.dtype)
    return (x.to(acc) + residual.to(acc)).to(rdt)


def effective_weight(variant: Variant, weight, n: int, device) -> torch.Tensor:
    """offset + w in float64 (ones without a weight): the weight the normalised row is multiplied by."""
    if weight is None:
        return torch.ones(n, dtype=torch.float64, device=device)
    return weight.detach().to(torch.float64) + variant.weight_offset


@dataclass
class Expected:
    """What a variant forward must give: the references, their bounds, and the rows compared."""

    y_ref: torch.Tensor
    bound_y: torch.Tensor
    res_ref: torch.Tensor | None
    bound_res: torch.Tensor | None
    rows_ok: torch.Tensor
    nonfinite: torch.Tensor
    analysis_y: torch.Tensor


def expect_forward(variant: Variant, x, weight, eps, residual) -> Expected:
    """The references and bounds: the rounding analysis of the normalised input (the sum as declared) times
    offset + w, widened per row to EAGER_K times the error of the eager computation in the declared order
    (judge._eager_widened), with the float32 sum's own rounding; residual_out within a rounding of its dtype."""
    v = normalised_input(variant, x, residual)
    stats = tol.row_stats(v, eps)
    w_eff = effective_weight(variant, weight, x.shape[-1], x.device)
    y_ref, res_ref = reference(variant, x, weight, eps, residual)
    bound_y, _ = tol.forward_bounds(v, w_eff, eps, stats, x.dtype)
    if variant.fused and variant.sum == "float32" and x.dtype != torch.float64:
        bound_y = bound_y + 2 * UNIT_FLOAT32 * y_ref.abs()  # the float32 sum against the exact one
    analysis = bound_y
    check = judge.row_mask(stats.verifiable, x.shape)
    for y_e, _ in emulations(variant, x, weight, eps, residual):
        bound_y = torch.maximum(bound_y, judge._eager_widened(analysis, y_e.detach(), y_ref, check, rowwise=True))
    bound_res = None
    if res_ref is not None:
        rdt = variant.residual_torch_dtype(x.dtype)
        bound_res = (res_ref.abs() * (tol.unit_roundoff(rdt) + UNIT_FLOAT32) * tol.SAFETY
                     + torch.finfo(rdt).tiny)
    return Expected(y_ref, bound_y, res_ref, bound_res, stats.verifiable | ~stats.finite, ~stats.finite, analysis)


def call(target, variant: Variant, x, weight, eps, residual) -> dict:
    """The target's forward in the variant's call form; {"y": ..., "residual_out": ...} (the latter with a
    fused add). An in-place form's outputs are x and residual themselves, after the call."""
    args = (x, weight, eps) + ((residual,) if variant.fused else ())
    out = target.call("forward", target.module.forward, *args)
    if variant.residual == "in_place":
        return {"y": x, "residual_out": residual}
    if variant.residual == "returned":
        if not (isinstance(out, (tuple, list)) and len(out) >= 2 and all(isinstance(t, torch.Tensor) for t in out[:2])):
            raise LawFailure(f"forward returned {type(out).__name__}; expected (y, residual_out) for a fused "
                         "residual add returned")
        return {"y": out[0], "residual_out": out[1]}
    y = out if isinstance(out, torch.Tensor) else (out[0] if isinstance(out, (tuple, list)) and out else None)
    if not isinstance(y, torch.Tensor):
        raise LawFailure(f"forward returned {type(out).__name__}; expected y (a Tensor) or (y, inv_rms)")
    return {"y": y}
