"""Refusals judged by evidence: a refusal is a decision about a class of inputs, never an accident.

Without a declared contract, a target may refuse an input only where a class of inputs explains the
refusal: the whole class refused, no accepted case in it. A class is one condition on a case, or two
together (harness.judging.contract.parse_class): x's dtype, the (x, weight) dtype pair, x's layout, the
weight's layout, N above the largest N accepted, N not a multiple of K, zero rows. grad_out's layout
is never one: autograd picks it (``y.sum()`` hands over a stride-0 grad_out, a transpose a strided
one), so a backward that refuses it crashes in training.

When a case is refused, the gate asks the target directly, with the law that covers the refused
call (forward_matches_reference or backward_matches_reference):
  - the same case again: a refusal that comes and goes on one input is a failure;
  - the case one step out of each condition it meets (float32 for bfloat16, a contiguous x for a
    transposed one, N rounded to a multiple of K, one row for none, a longer N): which steps make it
    accepted, and whether longer rows are accepted too;
  - the simplest case of each candidate class (two rows of the same N, float32, contiguous, but for
    the class's own conditions): is the whole class refused, with the same message?
Every answer is kept as evidence for the rest of the run. A class that explains a refusal joins the
contract inferred for the target (Inference.contract): the rest of the run draws inside it, and the
report states it as the declaration that would give it. A refusal that no class explains is a failure
of the law that met it: "crashed on a valid input", with the nearest accepted case beside it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Callable

from harness.judging.cases import Case, layout_possible
from harness.judging.contract import Contract, in_class, parse_class, parse_condition

# The laws whose verdict on a case says the target accepted (or refused) that case's own inputs, and
# which calls they make with them: evidence for and against a class. gradcheck and batch_invariant run
# inputs of their own (another dtype, other batches); autograd_grad_out hands over grad_outs of its own.
EVIDENCE_LAWS = {
    "forward_matches_reference": ("forward",), "forward_matches_reference_large": ("forward",),
    "forward_matches_reference_tall": ("forward",), "scale_invariance": ("forward",),
    "backward_matches_reference": ("forward", "backward"), "backward_matches_reference_large": ("forward", "backward"),
    "backward_matches_reference_tall": ("forward", "backward"), "inputs_unchanged": ("forward", "backward"),
    "every_output_written": ("forward", "backward"), "outputs_kept": ("forward", "backward"),
    "nonfinite_propagates": ("forward", "backward"), "strided_equals_contiguous": ("forward", "backward"),
    "rows_independent": ("forward", "backward"), "deterministic": ("forward", "backward"),
    "row_offsets_past_2_31": ("forward", "backward"),
}
# Laws whose refusals are not judged by the case's classes: they run the target in a dtype of their own.
OWN_INPUT_LAWS = ("gradcheck", "batch_invariant")
PROBE_LAW = {"forward": "forward_matches_reference", "backward": "backward_matches_reference"}
MAX_PROBE_ELEMENTS = 1 << 24  # a longer-row step keeps the case at most this big (fewer rows)
CLASSES_HELP = ("a refusal is allowed only for a whole class of inputs: a dtype, an (x, weight) dtype pair, a "
                "layout of x or of the weight, N above the largest N accepted, N not a multiple of K, zero rows, "
                "or two of these together")


def cause_of(message: str) -> str:
    """A refusal's message with numbers blanked, and runs of them (a shape, strides) made one, so refusals
    of one kind group together: "strides [1, 1, 0, 1]" and "strides [2]" are one cause, "strides [N]"."""
    first = message.strip().splitlines()[0] if message.strip() else "(no message)"
    blanked = re.sub(r"(?<![A-Za-z_\d])-?\d+(\.\d+)?(e[+-]?\d+)?", "N", first)
    runs = re.sub(r"N(?:\s*(?:,|×| x )\s*N)+", "N", blanked)
    # A one-element tuple keeps its comma, "(2,)": without it, "(N,)" and "(N)" would be two causes.
    return re.sub(r"N\s*,\s*(?=[)\]])", "N", runs)[:200]


def call_of(message: str) -> str:
    """Which call a refusal's message says raised: forward or backward."""
    return "backward" if message.startswith("backward") else "forward"


def _moved(case: Case, **changes) -> Case | None:
    """case with changes, or None where that case cannot be made (a layout its new shape cannot take)."""
    shape = changes.get("shape", case.shape)
    for key in ("layout", "grad_layout"):
        if not layout_possible(changes.get(key, getattr(case, key)), shape):
            return None
    wl = changes.get("weight_layout", case.weight_layout)
    if wl != "contiguous" and not layout_possible(wl, (shape[-1],) if shape else (0,)):
        return None
    try:
        return dataclasses.replace(case, **changes)
    except ValueError:
        return None


def _reshaped(case: Case, n: int) -> tuple[int, ...]:
    """case's shape with N = n, its rows cut so that it stays under MAX_PROBE_ELEMENTS."""
    rows = case.rows
    if rows * n > MAX_PROBE_ELEMENTS:
        return (max(1, MAX_PROBE_ELEMENTS // n), n)
    return case.shape[:-1] + (n,)


def steps(r: Case, direction: str) -> list[tuple[str, str, Case]]:
    """(condition of r, what the step says, r moved one step out of that condition): the controls
    that tell which of r's conditions its refusal hangs on. "rows" is no class (told, never inferred)."""
    d = "float32" if r.dtype != "float32" else "float64"
    w = d if r.weight_dtype == r.dtype else "float32"
    out = [(f"dtype={r.dtype}", f"in {d}", _moved(r, dtype=d, weight_dtype=w))]
    if r.dtype != "float32":
        w = "float32" if r.weight_dtype == r.dtype else r.dtype
        out.append((f"weight_dtype={r.weight_dtype}", f"with a {w} weight", _moved(r, weight_dtype=w)))
    if r.layout != "contiguous":
        out.append((f"layout={r.layout}", "with x contiguous", _moved(r, layout="contiguous")))
    if direction == "backward" and r.grad_layout != "contiguous":
        out.append((f"grad_layout={r.grad_layout}", "with a contiguous grad_out", _moved(r, grad_layout="contiguous")))
    if r.weight_layout != "contiguous":
        out.append((f"weight_layout={r.weight_layout}", "with a contiguous weight",
                    _moved(r, weight_layout="contiguous")))
    if r.n >= 1:
        # Each power of two N is not a multiple of, smallest first: a target that needs N % 8 refuses an odd N
        # at N % 2 too, so judge() asks the next until one is accepted (it takes the first).
        k = (r.n & -r.n) * 2
        while k <= 256:
            n = r.n - r.n % k if r.n > k else k
            out.append((f"n%{k}", f"at N = {n}", _moved(r, shape=r.shape[:-1] + (n,))))
            k *= 2
    if r.rows == 0:
        out.append(("zero_rows", "with one row", _moved(r, shape=(1, r.n))))
    elif r.rows > 2:
        out.append(("rows", "with 2 rows", _moved(r, shape=(2, r.n))))
    return [(c, what, m) for c, what, m in out if m is not None]


def brief(case: Case) -> str:
    """A case in a few words: shape, dtypes, the layouts that are not contiguous."""
    parts = [f"{list(case.shape)} {case.dtype}" + (f"/w:{case.weight_dtype}" if case.weight_dtype != case.dtype else "")]
    for name in ("layout", "grad_layout", "weight_layout"):
        if getattr(case, name) != "contiguous":
            parts.append(f"{name.replace('_layout', '')} {getattr(case, name)}" if name != "layout"
                         else getattr(case, name))
    return " ".join(parts)


def longer(r: Case) -> list[Case]:
    """r with longer rows (about twice as long: the same N mod 16, and a multiple of 16): if either is
    accepted, N above some size is not what r's refusal hangs on (a row as long but even, say, is fine)."""
    if r.n < 1:
        return []
    n = r.n + 16 * max(1, r.n // 16)
    out = [_moved(r, shape=_reshaped(r, n)), _moved(r, shape=_reshaped(r, n - n % 16 + 16))]
    return [m for m in out if m is not None]


def simplest(cls: str, r: Case) -> Case | None:
    """The simplest case of a class, near r: two rows, float32 (r's weight dtype relation), contiguous,
    N as r's (or, for N not a multiple of K, 3K/2), but for the class's own conditions."""
    conds = dict(parse_condition(c) for c in cls.split("&"))
    dtype = conds.get("dtype", "float32")
    weight = conds.get("weight_dtype", dtype if r.weight_dtype == r.dtype else "float32")
    n = r.n
    if "n_not_multiple" in conds and "n_above" not in conds:
        k = conds["n_not_multiple"]
        n = k + k // 2
    layout, wl = conds.get("layout", "contiguous"), conds.get("weight_layout", "contiguous")
    shapes = [(0, n)] if "zero_rows" in conds else [(2, n), (2, 2, n), r.shape[:-1] + (n,)]
    for shape in shapes:
        m = _moved(r, shape=shape, dtype=dtype, weight_dtype=weight, layout=layout, grad_layout="contiguous",
                   weight_layout=wl, pattern="normal", weight_pattern="normal", grad_pattern="normal")
        if m is not None:
            return m
    return None


@dataclass
class Evidence:
    case: Case
    direction: str  # the furthest call the verdict speaks of: forward, or backward (forward accepted too)
    accepted: bool
    cause: str = ""


@dataclass
class Finding:
    """What a refusal came to: the class that explains it, or why none does."""

    explained_by: str | None
    message: str
    probes: int = 0


@dataclass
class Inference:
    """The evidence of one process's run and the classes it established, per direction."""

    has_backward: bool = True
    evidence: list[Evidence] = field(default_factory=list)
    # direction -> class -> {"cause", "count", "example", "simplest"}
    classes: dict[str, dict[str, dict]] = field(default_factory=lambda: {"forward": {}, "backward": {}})
    contradicted: list[str] = field(default_factory=list)  # classes an accepted case later fell in

    # -- evidence ---------------------------------------------------------------------------------
    def note(self, law: str, case: Case, status: str, message: str = "") -> None:
        """What a law's verdict on case says of the target's classes: accepted or refused, and how far."""
        if law in OWN_INPUT_LAWS:
            return
        if status == "rejected":
            self.evidence.append(Evidence(case, call_of(message), False, cause_of(message)))
            return
        calls = EVIDENCE_LAWS.get(law)
        if status not in ("pass", "fail") or not calls:
            return
        direction = "backward" if "backward" in calls and self.has_backward else "forward"
        self.evidence.append(Evidence(case, direction, True))
        for d in ("forward", "backward") if direction == "backward" else ("forward",):
            for cls in list(self.classes[d]):
                if in_class(cls, case):
                    self.contradicted.append(f"{cls} ({d}): {case.short()} was accepted by {law}")
                    del self.classes[d][cls]

    def _accepted(self, direction: str):
        return [e.case for e in self.evidence if e.accepted and (direction == "forward" or e.direction == "backward")]

    def established(self, case: Case, direction: str) -> str | None:
        return next((cls for cls in self.classes[direction] if in_class(cls, case)), None)

    # -- judging a refusal -------------------------------------------------------------------------
    def judge(self, law: str, r: Case, message: str, run: Callable[[str, Case], "tuple[str, str]"]) -> Finding:
        """Whether a class explains the refusal of r by law (message: the refusal). run(law, case) ->
        (status, message) asks the target, in the run's worker, about another case."""
        direction = call_of(message)
        cause = cause_of(message)
        known = self.established(r, direction)
        if known:
            self.classes[direction][known]["count"] += 1
            return Finding(known, f"explained by the class {known}")
        probe_law = PROBE_LAW[direction]
        probes = 0

        def ask(case: Case) -> bool | None:
            nonlocal probes
            probes += 1
            status, msg = run(probe_law, case)
            if status == "rejected":
                self.evidence.append(Evidence(case, direction, False, cause_of(msg)))
                return False
            if status in ("pass", "fail"):
                self.evidence.append(Evidence(case, direction, True))
                return True
            return None  # a crash, a hang, the budget: no evidence either way

        again = ask(r)
        if again:
            if law == probe_law:
                return Finding(None, "the same input was accepted when asked again: a refusal that comes and goes "
                                     "on one input (state left by earlier calls, a race, memory read uninitialised)",
                               probes)
            if law == "autograd_grad_out":
                return Finding(None, "the backward refused the grad_out that autograd hands over (y.sum() gives a "
                                     "stride-0 one, a transpose a strided one) while it accepted the case's own: that "
                                     "layout is not the caller's choice, so this refusal is a crash in training",
                               probes)
            return Finding(None, f"{law} refused a call it made from the case (a part of its rows, a contiguous copy, a "
                                 f"second call) while the case's own {direction} was accepted", probes)
        boundary, nearest, multiple_found = [], None, False
        for cond, what, control in steps(r, direction):
            if cond.startswith("n%") and multiple_found:
                continue  # the smallest multiple accepted is the class; larger ones say nothing more
            ok = ask(control)
            multiple_found |= bool(ok) and cond.startswith("n%")
            if ok and nearest is None:
                nearest = f"the same case {what} was accepted"
            if ok and cond != "rows":
                boundary.append(cond)
        longer_ok = False
        for big in longer(r):
            if ask(big):
                longer_ok = True
                if nearest is None:
                    nearest = f"the same case at N = {big.n} was accepted"
                break
        grad = [c for c in boundary if c.startswith("grad_layout=")]
        singles = [c for c in boundary if not c.startswith("grad_layout=")]
        candidates = list(singles)
        if not longer_ok:  # longer rows refused too (or not asked): N above some size may be the class
            candidates.append("n>")
        pairs = [f"{a}&{b}" for i, a in enumerate(candidates) for b in candidates[i + 1:]
                 if not (a.startswith("weight_dtype=") and b.startswith("weight_dtype="))]
        # The weight's dtype alone names no class a caller chooses apart from x's: it is judged with x's.
        tried = [c for c in candidates if not c.startswith("weight_dtype=")] + pairs
        why_not = []
        for cand in tried:
            cls = self._with_threshold(cand, r, direction)
            if cls is None:
                continue
            against = next((a for a in self._accepted(direction) if in_class(cls, a)), None)
            if against is not None:
                why_not.append(f"{cls}: {brief(against)} was accepted")
                continue
            m = simplest(cls, r)
            if m is None:
                continue
            if "n>" in cls:  # the largest N accepted so far may be far below the real limit: bisect to it
                cls = self._bisected(cls, m, ask)
            status, msg = run(probe_law, m)
            probes += 1
            if status == "rejected" and cause_of(msg) == cause:
                self.evidence.append(Evidence(m, direction, False, cause))
                self.classes[direction][cls] = {"cause": cause, "count": 1, "example": brief(r),
                                                "simplest": brief(m)}
                return Finding(cls, f"explained by the class {cls}", probes)
            if status in ("pass", "fail"):
                self.evidence.append(Evidence(m, direction, True))
                why_not.append(f"{cls}: its simplest case {brief(m)} was accepted")
            elif status == "rejected":
                why_not.append(f"{cls}: its simplest case was refused for another reason ({cause_of(msg)})")
        parts = ["no class of inputs explains this refusal (" + CLASSES_HELP + ")"]
        if grad:
            parts.append(f"it hangs on grad_out's layout ({grad[0].split('=')[1]}), which autograd picks, not the "
                         "caller (y.sum() hands over a stride-0 grad_out, a transpose a strided one): refusing it is "
                         "a crash in training")
        if why_not:
            parts.append("not the whole class: " + "; ".join(why_not[:4]))
        if not any(e.accepted for e in self.evidence):
            parts.append("the target has accepted no input so far")
        parts.append(f"nearest accepted: {nearest}" if nearest else
                     "nearest accepted: no case one step from it (another dtype, layout, N or number of rows) was accepted")
        return Finding(None, "\n  ".join(parts), probes)

    def _bisected(self, cls: str, m: Case, ask: Callable[[Case], "bool | None"]) -> str:
        """cls (a class with n>M) with M raised to the longest row accepted below m's N, found by
        bisection: the drawing that follows is capped at M, so M must be the target's limit, not the
        longest row drawn before."""
        conds = cls.split("&")
        lo = next(int(c[2:]) for c in conds if c.startswith("n>"))
        hi = m.n
        while hi - lo > 1:
            mid = (lo + hi) // 2
            probe = _moved(m, shape=m.shape[:-1] + (mid,))
            if probe is None:
                break
            ok = ask(probe)
            if ok is None:
                break
            lo, hi = (mid, hi) if ok else (lo, mid)
        return parse_class("&".join([c for c in conds if not c.startswith("n>")] + [f"n>{lo}"]))

    def _with_threshold(self, cand: str, r: Case, direction: str) -> str | None:
        """cand with its N threshold filled in (n> becomes n>M, M the largest N accepted in the rest of
        the class), in its one spelling; None where no M below r's N exists."""
        conds = cand.split("&")
        if "n>" not in conds:
            return parse_class(cand)
        rest = [c for c in conds if c != "n>"]
        accepted = [a.n for a in self._accepted(direction) if all(in_class(c, a) for c in rest)]
        if not accepted or max(accepted) >= r.n:
            return None
        return parse_class("&".join(rest + [f"n>{max(accepted)}"]))

    # -- what it comes to ----------------------------------------------------------------------------
    def contract(self) -> Contract:
        """The classes established so far, as a contract: the one the rest of the run draws inside."""
        return inferred_contract(self.classes)

    def to_json(self) -> dict:
        return {"classes": self.classes, "contradicted": self.contradicted}


def merge_classes(into: dict, other: dict) -> None:
    """Add one process's classes (Inference.to_json()["classes"]) to a run's."""
    for d, classes in other.items():
        for cls, info in classes.items():
            have = into.setdefault(d, {}).get(cls)
            if have is None:
                into[d][cls] = dict(info)
            else:
                have["count"] += info["count"]


def inferred_contract(classes: dict) -> Contract:
    """The contract a run's classes (merged over its processes) come to: a class of one condition in the
    contract's own keys where one says it (dtypes, max_n, n_multiple_of, zero_rows), the rest excluded."""
    found = list(dict.fromkeys(c for d in ("forward", "backward") for c in classes.get(d, {})))
    if not found:
        return Contract()
    base = Contract()
    dtypes, max_n, multiple, zero, exclude = list(base.dtypes), None, 1, True, []
    for cls in found:
        facet, value = parse_condition(cls) if "&" not in cls else (None, None)
        if facet == "dtype" and value in dtypes and len(dtypes) > 1:
            dtypes.remove(value)
        elif facet == "n_above":
            max_n = value if max_n is None else min(max_n, value)
        elif facet == "n_not_multiple":
            multiple = max(multiple, value)
        elif facet == "zero_rows":
            zero = False
        else:
            exclude.append(cls)
    return dataclasses.replace(base, dtypes=tuple(dtypes), max_n=max_n, n_multiple_of=multiple, zero_rows=zero,
                               exclude=tuple(exclude), source="inferred from the target's refusals", inferred=True)


def report_lines(classes: dict, contradicted: list[str]) -> list[str]:
    """The report's account of the inferred contract: each class, and the declaration that gives it."""
    lines = []
    c = inferred_contract(classes)
    if c.inferred:
        flags, entry = c.declaration()
        lines.append(f"contract inferred from the target's refusals (each refusal explained by a whole class of "
                     f"inputs refused): declare it with {flags}, or {entry}")
        for d in ("forward", "backward"):
            for cls, info in sorted(classes.get(d, {}).items()):
                lines.append(f"  {d} refuses {cls}: {info['count']} case(s) refused with \"{info['cause']}\"; its "
                             f"simplest case refused too ({info['simplest']})")
    for line in contradicted:
        lines.append(f"FAIL refusals: a class inferred from refusals was contradicted: {line}")
    return lines

