"""What the laws share: poisoned outputs, the checked calls into the target, input guards."""

from __future__ import annotations

import contextlib
import math

import torch

from harness.judging import judge, tolerance as tol
from harness.judging.cases import Case
from harness.judging.target import LawFailure, Target

# The poisons output memory is filled with before a call, so that what a target never wrote shows. The NaN
# poison repeats the 16 bits 0x7FFA: a NaN in float16, bfloat16, float32 and float64 alike, with a payload no
# arithmetic makes (a computed NaN is 0x7E00, 0x7FC0, 0x7FC00000 or 0x7FF8000000000000, or its input's): an
# element that holds it bit for bit was never written (or was computed from memory that never was).
POISON_NAN, POISON_FINITE = judge.POISON_NAN, judge.POISON_FINITE  # every byte 0x42: finite in every dtype


def poison(device, nbytes: list[int], byte: int = POISON_NAN) -> None:
    """Fill and free blocks of the outputs' sizes, and of fractions of the largest (where a
    target's scratch buffers tend to fall), so the allocator hands the target memory that shows
    where it never wrote. byte: POISON_NAN or POISON_FINITE."""
    judge.finite_poison_filled(byte != POISON_NAN)
    sizes = [nb + nb % 2 for nb in nbytes if nb > 0]
    if sizes:
        sizes += [(max(sizes) >> k) & ~1 for k in range(1, 7) if max(sizes) >> k >= 256]
    if byte == POISON_NAN:
        blocks = [torch.full((nb // 2,), POISON_NAN, dtype=torch.int16, device=device) for nb in sizes for _ in range(4)]
    else:
        blocks = [torch.full((nb,), byte, dtype=torch.uint8, device=device) for nb in sizes for _ in range(4)]
    del blocks  # several blocks of each size, so that the next allocations of it are likely poisoned


def _nbytes(shape, dtype) -> int:
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def _fail(messages: list[str], case: Case, extra: str = "") -> None:
    msgs = [m for m in messages if m]
    if msgs:
        text = "\n".join(str(m) for m in msgs)
        raise LawFailure(f"{text}{extra}\n  case: {case.short()}")


def forward_checked(target: Target, x, weight, eps, case: Case, *, poison_byte=POISON_NAN, label=""):
    """Run the target's forward and compare y (and inv_rms) with the float64 reference.
    Returns (y, inv, facts)."""
    acc = tol.acc_dtype(x.dtype)
    poison(x.device, [_nbytes(x.shape, x.dtype), _nbytes(x.shape[:-1], acc)], poison_byte)
    with _untouched("forward", case, x=x, weight=weight):
        y, inv = target.forward(x, weight, eps)
    return y, inv, compare_forward(y, inv, x, weight, eps, case, label=label)


def compare_forward(y, inv, x, weight, eps, case: Case, *, label="", extra="") -> dict:
    """Compare y (and inv_rms, when not None) with the float64 reference; raise LawFailure."""
    exp = judge.expect_forward(x, weight, eps)
    err: dict = {}
    _fail(judge.judge_forward(y, inv, x, weight, eps, label=label, exp=exp, measure=err), case, extra)
    return {"unverified_rows": exp.unverified_rows, "err": err}


def inv_for_backward(x, eps, inv_from_target):
    if inv_from_target is not None:
        return inv_from_target
    x64 = x.detach().to(torch.float64)
    return torch.rsqrt((x64 * x64).mean(-1) + eps).to(tol.acc_dtype(x.dtype))


def backward_checked(target: Target, grad_out, x, weight, eps, inv, case: Case, *, poison_byte=POISON_NAN, label=""):
    """Run the target's backward with inv and compare with the float64 reference."""
    poison(x.device, [_nbytes(x.shape, x.dtype), _nbytes(weight.shape, weight.dtype)], poison_byte)
    with _untouched("backward", case, grad_out=grad_out, x=x, weight=weight, inv_rms=inv):
        gx, gw = target.backward(grad_out, x, weight, inv)
    return compare_grads(gx, gw, grad_out, x, weight, eps, inv, case, label=label)


def compare_grads(gx, gw, grad_out, x, weight, eps, inv, case, *, label="", weight_grad=True):
    err: dict = {}
    msgs, unverified = judge.judge_backward(gx, gw, grad_out, x, weight, eps, inv, label=label, weight_grad=weight_grad,
                                            measure=err)
    _fail(msgs, case)
    return gx, gw, {"unverified_rows": unverified, "err": err}


@contextlib.contextmanager
def _untouched(call: str, case: Case, **inputs):
    """Fail with a precise message when the call writes into one of its inputs' storage (a
    target that stores grad_x in grad_out's memory, say): every later comparison would
    otherwise be made against the overwritten values."""
    before = {n: _storage_bytes(t).clone() for n, t in inputs.items()}
    yield
    msgs = []
    for name, t in inputs.items():
        after = _storage_bytes(t)
        if not torch.equal(before[name], after):
            changed = int((before[name] != after).sum())
            msgs.append(f"{call} overwrote its input {name}: {changed} of {after.numel()} byte(s) of its storage "
                        f"changed during the call (it writes in place into {name}'s memory)")
    _fail(msgs, case)


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous()
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _same_bits(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


def _storage_bytes(t: torch.Tensor) -> torch.Tensor:
    """All bytes of t's storage (gaps between strided elements too), as a uint8 tensor."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


class _Adapter:
    """The target's forward/backward with exceptions sorted (for autograd.Function)."""

    def __init__(self, target: Target):
        self.target = target

    def forward(self, x, w, eps):
        y, inv = self.target.forward(x, w, eps)
        return y if inv is None else (y, inv)

    def backward(self, dy, x, w, inv):
        return self.target.backward(dy, x, w, inv)


def _stat(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def make_function(module) -> type[torch.autograd.Function]:
    """The seed card's ``CustomRMSNorm`` autograd.Function over any module with its contract.

    A module whose forward returns only y gets inv_rms computed here (float32, float64 for
    float64 input) for its backward.
    """

    class CustomRMSNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, eps):
            out = module.forward(x, weight, eps)
            if isinstance(out, (tuple, list)):
                y, inv_rms = out[0], out[1]
            else:
                y = out
                x64 = x.detach().to(torch.float64)
                inv_rms = torch.rsqrt((x64 * x64).mean(-1) + eps).to(_stat(x.dtype))
            ctx.save_for_backward(x, weight, inv_rms)
            ctx.eps = eps
            return y

        @staticmethod
        def backward(ctx, grad_out):
            x, weight, inv_rms = ctx.saved_tensors
            grad_x, grad_weight = module.backward(grad_out, x, weight, inv_rms)
            return grad_x, grad_weight, None

    return CustomRMSNorm
