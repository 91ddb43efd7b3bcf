"""Laws of memory hygiene: inputs untouched, every output written."""

from __future__ import annotations

from ..cases import Case, materialize
from ..target import Target
from .common import POISON_FINITE, POISON_NAN, _untouched, backward_checked, forward_checked, inv_for_backward
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

