"""Laws of memory and state: inputs untouched, every output written, outputs kept between calls, calls
right after calls at neighbouring signatures."""

from __future__ import annotations

import dataclasses

import torch

from harness.judging.cases import DTYPES, Case, layout_possible, materialize
from harness.judging.target import LawFailure, NotJudged, Rejected, Target
from harness.judging.laws.common import (POISON_FINITE, POISON_NAN, _bits, _fail, _same_bits, _untouched, backward_checked, forward_checked, inv_for_backward)
from harness.judging.laws.registry import law
from harness.judging.contract import of_target

@law()
def inputs_unchanged(target: Target, case: Case):
    """Forward and backward leave x, weight, grad_out and inv_rms (and their storage) untouched."""
    t = materialize(case, target.device)
    with _untouched("forward", case, x=t.x, weight=t.weight, grad_out=t.grad_out):
        _, inv = target.forward(t.x, t.weight, case.eps)
    if target.has_backward:
        inv_b = inv_for_backward(t.x, case.eps, inv)
        with _untouched("backward", case, x=t.x, weight=t.weight, grad_out=t.grad_out, inv_rms=inv_b):
            target.backward(t.grad_out, t.x, t.weight, inv_b)
    return {}


@law()
def every_output_written(target: Target, case: Case):
    """Every output element is written: outputs land in memory poisoned with NaN, then with a
    finite value, and must still match the reference."""
    t = materialize(case, target.device)
    facts = {}
    for byte, label in ((POISON_NAN, "[NaN-poisoned] "), (POISON_FINITE, "[0x42-poisoned] ")):
        _, inv, facts = forward_checked(target, t.x, t.weight, case.eps, case, poison_byte=byte, label=label)
        if target.has_backward:
            backward_checked(target, t.grad_out, t.x, t.weight, case.eps, inv_for_backward(t.x, case.eps, inv), case,
                             poison_byte=byte, label=label)
    return facts


# The seed of the second call's inputs: other values, the same shapes, dtypes and layouts.
OTHER_SEED = 0x5EED


def _span(t: torch.Tensor) -> tuple[int, int] | None:
    """The bytes [first, last) a tensor's elements occupy, None when it has none."""
    if t.numel() == 0:
        return None
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    sa, sb = _span(a), _span(b)
    return sa is not None and sb is not None and a.device == b.device and sa[0] < sb[1] and sb[0] < sa[1]


class _Kept:
    """The outputs handed out so far: which call returned each, and a copy of its bits then."""

    LOSS = ("a buffer kept by shape?); a model with two RMSNorm layers gets one layer's values in the other's")

    def __init__(self, case: Case):
        self.case = case
        self.outputs: list[tuple[int, str, torch.Tensor, torch.Tensor]] = []

    def add(self, call: int, **outputs) -> None:
        """Keep the call's outputs (None: not returned); fail where one lies in another call's output."""
        for name, t in outputs.items():
            if t is None:
                continue
            for other_call, other, kept, _ in self.outputs:
                if other_call != call and _overlap(t, kept):
                    _fail([f"call {call}'s {name} lies in the memory of call {other_call}'s {other}, which the "
                           f"caller still holds: the target hands out memory it writes again ({self.LOSS}"],
                          self.case)
            self.outputs.append((call, name, t, t.detach().clone()))

    def check(self, during: str) -> None:
        """Fail where an output kept so far no longer has the bits it was returned with."""
        msgs = []
        for call, name, t, copy in self.outputs:
            if not _same_bits(t, copy):
                diff = int((_bits(t) != _bits(copy)).sum())
                msgs.append(f"call {call}'s {name} changed during {during}: {diff} of {t.numel()} element(s) differ "
                            f"from what the call returned (the target writes again into memory it handed out: "
                            f"{self.LOSS}")
        _fail(msgs, self.case)


INTERLEAVED = ("(two calls interleaved, as two layers of a model make them, where the other laws make one at a time: "
               "a target right alone and wrong here carries state from one call into the next, as a buffer or a "
               "cache kept by shape)")


def _told(run, label: str, hint: str | None = INTERLEAVED):
    """run(label); a wrong answer it finds (its message names the label) told with hint, above its case line
    (None: as it is, for a call no other call came before)."""
    try:
        return run(label)
    except LawFailure as e:
        text, sep, case_line = str(e).rpartition("\n  case: ")
        if not (hint and sep and label.strip() in text):
            raise
        raise LawFailure(f"{text}\n  {hint}{sep}{case_line}") from None


@law()
def outputs_kept(target: Target, case: Case):
    """Two calls on other inputs of the same shapes, in a model's order (forward 1, forward 2, backward 2,
    backward 1): each call is right, and keeps its outputs' values and memory while the other runs."""
    t1 = materialize(case, target.device)
    t2 = materialize(dataclasses.replace(case, seed=case.seed ^ OTHER_SEED), target.device)
    eps = case.eps
    kept = _Kept(case)
    y1, inv1, facts = forward_checked(target, t1.x, t1.weight, eps, case, label="[call 1's forward] ")
    kept.add(1, y=y1, inv_rms=inv1)
    y2, inv2, _ = _told(lambda lb: forward_checked(target, t2.x, t2.weight, eps, case, label=lb),
                        "[call 2's forward, after call 1's] ")
    kept.check("call 2's forward")
    kept.add(2, y=y2, inv_rms=inv2)
    if target.has_backward:
        inv1_b, inv2_b = inv_for_backward(t1.x, eps, inv1), inv_for_backward(t2.x, eps, inv2)
        g2, w2, _ = _told(lambda lb: backward_checked(target, t2.grad_out, t2.x, t2.weight, eps, inv2_b, case,
                                                      label=lb), "[call 2's backward, after both forwards] ")
        kept.check("call 2's backward")
        kept.add(2, grad_x=g2, grad_weight=w2)
        g1, w1, _ = _told(lambda lb: backward_checked(target, t1.grad_out, t1.x, t1.weight, eps, inv1_b, case,
                                                      label=lb), "[call 1's backward, after call 2's] ")
        kept.check("call 1's backward")
        kept.add(1, grad_x=g1, grad_weight=w1)
    return facts


def _block(n: int) -> int:
    """The power of two a kernel's block for a row of n elements is (Triton's next_power_of_2)."""
    return 1 << max(0, (n - 1).bit_length())


def _moved(case: Case, **changes) -> Case | None:
    """case with changes, its layouts kept where the new shape can take them; None where it cannot be made."""
    shape = changes.get("shape", case.shape)
    for key in ("layout", "grad_layout"):
        if not layout_possible(getattr(case, key), shape):
            changes[key] = "contiguous"
    if case.weight_layout != "contiguous" and not layout_possible(case.weight_layout, (shape[-1],)):
        changes["weight_layout"] = "contiguous"
    try:
        return dataclasses.replace(case, **changes)
    except ValueError:
        return None


# The parts of a kernel's signature after_neighbours steps in, in the order it calls them.
NEIGHBOUR_PARTS = ("n", "eps", "rows", "weight_dtype", "dtype")


def neighbours(case: Case, contract) -> list[tuple[str, Case]]:
    """Cases one step from case in one part of a kernel's signature each, inside the contract: another row
    length of the same power-of-two block (the block itself, or one step of what the contract asks below it:
    one length a block, so that a target compiling on first use compiles it once), another eps, another
    number of rows, the other weight dtype (16-bit x), another dtype. A kernel compiled once per signature
    (Triton, torch.compile, CuTe DSL) and cached under a key that leaves one of these out gets the
    neighbour's code for the case."""
    n, k, block = case.n, contract.n_multiple_of, _block(case.n)
    if block != n and block % k == 0:
        n2 = block
    elif n - k >= 1 and _block(n - k) == block:
        n2 = n - k
    else:
        n2 = n + k
    eps2 = 1e-5 if case.eps != 1e-5 else 1e-6
    rows_shape = (case.shape[0] + 1,) + case.shape[1:] if len(case.shape) >= 2 else (2, n)
    found = {"n": (f"N = {n2}", _moved(case, shape=case.shape[:-1] + (n2,))),
             "eps": (f"eps = {eps2:g}", _moved(case, eps=eps2)),
             "rows": (f"shape {list(rows_shape)}", _moved(case, shape=rows_shape))}
    if case.dtype in ("float16", "bfloat16"):
        w = "float32" if case.weight_dtype == case.dtype else case.dtype
        found["weight_dtype"] = (f"weight {w}", _moved(case, weight_dtype=w))
    for d in (d for d in ("float32", "bfloat16", "float16", "float64") if d != case.dtype and d in DTYPES):
        other = _moved(case, dtype=d, weight_dtype=d if case.weight_dtype == case.dtype else "float32")
        if other is not None and contract.allows(other):
            found["dtype"] = (f"dtype {d}", other)
            break
    return [found[part] for part in NEIGHBOUR_PARTS
            if part in found and found[part][1] is not None and contract.allows(found[part][1])]


NEIGHBOURS = ("(the calls before it were at neighbouring signatures, each in one part: a call right alone and wrong "
              "after them got state they left, as compiled code cached under a key that leaves out what differs)")


def _judged(target: Target, case: Case, t, eps: float, label: str, after: bool) -> dict:
    """Forward (and backward) of t, judged; a wrong answer told as one that came after other calls (after)."""
    def both(lb):
        _, inv, facts = forward_checked(target, t.x, t.weight, eps, case, label=lb)
        if target.has_backward:
            backward_checked(target, t.grad_out, t.x, t.weight, eps, inv_for_backward(t.x, eps, inv), case, label=lb)
        return facts

    return _told(both, label, NEIGHBOURS if after else None)


@law()
def after_neighbours(target: Target, case: Case):
    """The case is right after calls at neighbouring signatures in the same process (another N of its
    power-of-two block, another eps, another number of rows, the other weight dtype, another dtype), each
    right too: a kernel compiled once per signature must not reuse another's code for it."""
    before = []
    for what, other in neighbours(case, of_target(target.module, target.spec)):
        try:
            _judged(target, case, materialize(other, target.device), other.eps, f"[call {len(before) + 1}, at {what}] ",
                    after=bool(before))
        except (Rejected, NotJudged):
            # A neighbour the target refuses leaves nothing behind; the other laws judge refusals. One in a
            # dtype that cannot be judged where it runs (the interpreter's bfloat16) is not made.
            continue
        before.append(what)
    label = f"[the case, after calls at {', '.join(before)}] " if before else "[the case] "
    facts = _judged(target, case, materialize(case, target.device), case.eps, label, after=bool(before))
    return dict(facts, neighbours=len(before))
