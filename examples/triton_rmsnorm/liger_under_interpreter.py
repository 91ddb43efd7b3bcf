"""Liger-Kernel's RMSNorm (liger_kernel.ops.rms_norm.LigerRMSNormFunction, 0.8.5) on CPU tensors under
Triton's interpreter: as it is, with interpreter_shim.float_scalars_have_to(), and with that and
interpreter_shim.libdevice_as_tl_math(); forward and backward (autograd, in_place False and True)
compared with tests/targets/correct_torch.py under check.py's bounds.

    python3 -m pip install --no-deps liger-kernel==0.8.5
    python3 examples/triton_rmsnorm/liger_under_interpreter.py      # from the repository root

It sets TRITON_INTERPRET=1 itself, before triton is imported.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
import triton
import triton.language as tl

from examples.triton_rmsnorm import check
from examples.triton_rmsnorm.interpreter_shim import (
    float_scalars_have_to,
    libdevice_as_tl_math,
)
from tests.targets import correct_torch

SHAPES = ((1, 8), (3, 7), (4, 64), (70, 300), (2, 3, 4097))
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
EPS = 1e-6


@triton.jit
def _uses_a_float(X, Y, s, n, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + cols, mask=cols < n)
    tl.store(Y + cols, tl.where(x > s, x * s + s / 3.0, x - s), mask=cols < n)


@triton.jit
def _widens_a_float(Y, s):
    tl.store(Y, s.to(tl.float64))


def shim_alone() -> None:
    """float_scalars_have_to on kernels of this file: one that uses a float argument without .to
    (outputs compared bit for bit with and without it), one that widens it with .to."""
    print("== float_scalars_have_to on a kernel that never calls .to, and on one that does")
    for dtype in (torch.float32, torch.float64, torch.float16):
        x = torch.randn(100, generator=torch.Generator().manual_seed(1)).to(dtype)
        ys = []
        for shims in ([], [float_scalars_have_to]):
            y = torch.empty_like(x)
            with contextlib.ExitStack() as stack:
                for shim in shims:
                    stack.enter_context(shim())
                _uses_a_float[(1,)](x, y, 0.1234567891234, 100, BLOCK=128)
            ys.append(y)
        print(f"  {str(dtype)[6:]}: outputs bit for bit the same with and without: {torch.equal(ys[0], ys[1])}")
    y = torch.empty(1, dtype=torch.float64)
    with float_scalars_have_to():
        _widens_a_float[(1,)](y, 0.1)
    print(f"  0.1 .to(tl.float64): {y.item()!r} (float32's 0.1 widened: "
          f"{float(torch.tensor(0.1, dtype=torch.float32))!r}, what the compiled path passes)")


def run(shape, dtype, in_place: bool) -> dict[str, float]:
    """Liger's y, rstd (its saved inv_rms), grad_x and grad_weight, in units of check.py's bound."""
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    gen = torch.Generator().manual_seed(sum(shape))
    x0 = torch.randn(*shape, generator=gen).to(dtype)
    w0 = torch.randn(shape[-1], generator=gen).to(dtype)
    g = torch.randn(*shape, generator=gen).to(dtype)
    y_ref, inv_ref = correct_torch.forward(x0, w0, EPS)
    gx_ref, gw_ref = correct_torch.backward(g, x0, w0, inv_ref)
    x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    y = LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", in_place)
    y.backward(g.clone())  # a copy: in_place=True writes grad_x into the gradient it is given
    acc = torch.finfo(torch.float32).eps
    extra = check._ulp(y_ref.double() / w0.double().abs(), dtype) * w0.double().abs()
    return {"y": check._excess(y.detach(), y_ref, acc, True, extra),
            "grad_x": check._excess(x.grad, gx_ref, acc, True),
            "grad_weight": check._excess(w.grad, gw_ref.to(w.dtype), acc, False)}


def attempt(label: str, shims) -> None:
    print(f"== {label}")
    for shape in SHAPES:
        for dtype in DTYPES:
            for in_place in (False, True):
                name = f"{list(shape)} {str(dtype)[6:]} in_place={in_place}"
                try:
                    with contextlib.ExitStack() as stack:
                        for shim in shims:
                            stack.enter_context(shim())
                        res = run(shape, dtype, in_place)
                except Exception as e:  # noqa: BLE001 (what Liger raises under the interpreter is the finding)
                    print(f"  {name}: raised {type(e).__name__}: {e}")
                    if not shims or len(shims) == 1:
                        return  # the same error for every input: one is enough
                    continue
                wrong = {k: v for k, v in res.items() if v > 1}
                print(f"  {name}: " + ("right" if not wrong else "WRONG") + " (" +
                      ", ".join(f"{k} {v:.4g}" for k, v in res.items()) + ")")


def main() -> int:
    if importlib.util.find_spec("liger_kernel") is None:
        print("liger_under_interpreter: expected liger-kernel installed (python3 -m pip install --no-deps "
              "liger-kernel==0.8.5), but it is not", file=sys.stderr)
        return 2
    shim_alone()
    attempt("as it is", [])
    attempt("with float_scalars_have_to", [float_scalars_have_to])
    attempt("with float_scalars_have_to and libdevice_as_tl_math", [float_scalars_have_to, libdevice_as_tl_math])
    return 0


if __name__ == "__main__":
    sys.exit(main())
