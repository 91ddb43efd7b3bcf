"""Laws of memory hygiene: inputs untouched, every output written, outputs kept between calls."""

from __future__ import annotations

import dataclasses

import torch

from ..cases import Case, materialize
from ..target import LawFailure, Target
from .common import (POISON_FINITE, POISON_NAN, _bits, _fail, _same_bits, _untouched, backward_checked,
                     forward_checked, inv_for_backward)
from .registry import law

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


def _interleaved(run, label: str, after_another: bool = True):
    """run(label); a wrong answer it finds (its message names the label) told as one of two interleaved calls
    where another call came before it."""
    try:
        return run(label)
    except LawFailure as e:
        text, sep, case_line = str(e).rpartition("\n  case: ")
        if not (after_another and sep and label.strip() in text):
            raise
        raise LawFailure(f"{text}\n  {INTERLEAVED}{sep}{case_line}") from None


@law()
def outputs_kept(target: Target, case: Case):
    """Two calls on other inputs of the same shapes, in a model's order (forward 1, forward 2, backward 2,
    backward 1): each call is right, and keeps its outputs' values and memory while the other runs."""
    t1 = materialize(case, target.device)
    t2 = materialize(dataclasses.replace(case, seed=case.seed ^ OTHER_SEED), target.device)
    eps = case.eps
    kept = _Kept(case)
    y1, inv1, facts = _interleaved(lambda lb: forward_checked(target, t1.x, t1.weight, eps, case, label=lb),
                                   "[call 1's forward] ", after_another=False)
    kept.add(1, y=y1, inv_rms=inv1)
    y2, inv2, _ = _interleaved(lambda lb: forward_checked(target, t2.x, t2.weight, eps, case, label=lb),
                               "[call 2's forward, after call 1's] ")
    kept.check("call 2's forward")
    kept.add(2, y=y2, inv_rms=inv2)
    if target.has_backward:
        inv1_b, inv2_b = inv_for_backward(t1.x, eps, inv1), inv_for_backward(t2.x, eps, inv2)
        g2, w2, _ = _interleaved(lambda lb: backward_checked(target, t2.grad_out, t2.x, t2.weight, eps, inv2_b, case,
                                                             label=lb), "[call 2's backward, after both forwards] ")
        kept.check("call 2's backward")
        kept.add(2, grad_x=g2, grad_weight=w2)
        g1, w1, _ = _interleaved(lambda lb: backward_checked(target, t1.grad_out, t1.x, t1.weight, eps, inv1_b, case,
                                                             label=lb), "[call 1's backward, after call 2's] ")
        kept.check("call 1's backward")
        kept.add(1, grad_x=g1, grad_weight=w1)
    return facts
