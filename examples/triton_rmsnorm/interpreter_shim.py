"""Two patches of Triton 3.8's interpreter (TRITON_INTERPRET=1), each a context manager, that let
kernels written for the compiled path run on CPU tensors:

  float_scalars_have_to()  Python float kernel arguments get the .to(dtype) they have compiled;
  libdevice_as_tl_math()   calls of triton.language.extra.libdevice functions reach tl.math's
                           function of the same name instead of the stub that returns None.

Liger-Kernel 0.8.5's RMSNorm needs both (eps.to(tl.float32), then libdevice's rsqrt).

float_scalars_have_to

The failure it answers. Compiled, a Python float passed to a @triton.jit kernel arrives as a
float32 scalar tensor (triton.runtime.jit.mangle_type types it "fp32"), so kernels write
``eps = eps.to(tl.float32)`` (Liger-Kernel's RMSNorm does, in liger_kernel/ops/rms_norm.py).
Under the interpreter (TRITON_INTERPRET=1), GridExecutor.__call__ hands each argument that is not
constexpr to triton.runtime.interpreter._implicit_cvt, which wraps bools, ints, tensors (their
data pointer), tuples and tensor descriptors as tl.tensor, and returns anything else as it is: a
float stays a Python float, and the kernel fails with
    InterpreterError: AttributeError("'float' object has no attribute 'to'")

What it patches: triton.runtime.interpreter._implicit_cvt, for the duration of the with block,
by a function that turns a float argument into InterpretedFloat and leaves every other argument to
the original. InterpretedFloat is a float (so every operation on it, and every isinstance check
in Triton's semantics, is what it was) with one method more: .to(dtype, fp_downcast_rounding,
bitcast), which builds the float32 scalar tensor the compiled path would have passed (the value
rounded to float32 first) and converts it as tl.tensor.to does. A kernel that never calls .to on
a float argument computes exactly what it did without the shim.

Limits. Only .to is given: other tl.tensor attributes of a scalar (.dtype, .cast) are still
missing. Arithmetic on the argument keeps Python-float semantics (a weakly typed scalar that
takes the other operand's dtype) where the compiled path has a float32 tensor that promotes
16-bit operands to float32: ``x_bf16 + eps`` is bfloat16 here and float32 compiled. The patch is
of a module global, so it affects every kernel launched in the process while the block runs
(other threads included); it is undone on exit, exceptions included. It is written against
triton 3.8.0's interpreter and refuses (ValueError) to patch one without _implicit_cvt.
"""

from __future__ import annotations

import contextlib
import sys

import numpy as np
import triton.language as tl
from triton.runtime import interpreter

LIBDEVICE = "triton.language.extra.libdevice"


class InterpretedFloat(float):
    """A float kernel argument under the interpreter, with the .to of the compiled path's float32 scalar."""

    def to(self, dtype, fp_downcast_rounding=None, bitcast=False):
        scalar = tl.tensor(interpreter.TensorHandle(np.array([float(self)], dtype=np.float32), tl.float32),
                           tl.float32)
        return scalar.to(dtype, fp_downcast_rounding=fp_downcast_rounding, bitcast=bitcast)


@contextlib.contextmanager
def float_scalars_have_to():
    """Within the block, float arguments of interpreted kernels are InterpretedFloat."""
    original = getattr(interpreter, "_implicit_cvt", None)
    if original is None:
        raise ValueError("float_scalars_have_to: expected triton.runtime.interpreter._implicit_cvt (triton 3.8), "
                         "but this triton's interpreter has none")

    def implicit_cvt(arg):
        if isinstance(arg, float) and not isinstance(arg, InterpretedFloat):
            return InterpretedFloat(arg)
        return original(arg)

    interpreter._implicit_cvt = implicit_cvt
    try:
        yield
    finally:
        interpreter._implicit_cvt = original


@contextlib.contextmanager
def libdevice_as_tl_math():
    """Within the block, a kernel's module-level names bound to a libdevice function that tl.math
    also has (rsqrt, sqrt, exp, log, floor, ...) are bound to tl.math's while the kernel runs.

    The failure it answers. triton.language.extra.libdevice holds stubs whose bodies are ``...``:
    compiling, the backend maps the module to its own (triton.language.extra.cuda.libdevice, whose
    functions call the device library); the interpreter does not, so a stub runs and returns None,
    and the kernel fails where it uses the result, e.g. Liger-Kernel's ``rstd = rsqrt(...)`` then
    ``tl.store(rstd_base, rstd)``:
        InterpreterError: TypeError("cannot convert None of type <class 'NoneType'> to tensor")

    What it patches: triton.runtime.interpreter._patch_lang, which the interpreter calls before it
    runs a kernel or a device function and whose scope it restores after a kernel. The patched one
    also rebinds, in the kernel's module, each global that is a libdevice stub with a tl.math
    namesake, through the same scope (so restored with the interpreter's own patches); on leaving
    the block every such global is set back too, as device-function calls never restore theirs.

    Limits: tl.math's function is the interpreter's numpy one, not the device library's (under the
    interpreter both would be numpy anyway); stubs without a tl.math namesake (tanh, pow, isnan,
    ...) still return None; a stub reached as an attribute (libdevice.rsqrt(x), not a name bound
    by ``from ... import rsqrt``) is not rebound."""
    original = getattr(interpreter, "_patch_lang", None)
    if original is None:
        raise ValueError("libdevice_as_tl_math: expected triton.runtime.interpreter._patch_lang (triton 3.8), "
                         "but this triton's interpreter has none")
    rebound: list[tuple[object, str, object]] = []

    def patch_lang(fn):
        scope = original(fn)
        module = sys.modules.get(fn.__globals__.get("__name__", ""))
        if module is None:
            return scope
        for name, value in list(fn.__globals__.items()):
            twin = getattr(tl.math, getattr(value, "__name__", ""), None)
            if callable(value) and getattr(value, "__module__", "") == LIBDEVICE and twin is not None:
                rebound.append((module, name, value))
                scope.set_attr(module, name, twin)
        return scope

    interpreter._patch_lang = patch_lang
    try:
        yield
    finally:
        interpreter._patch_lang = original
        for module, name, stub in reversed(rebound):
            setattr(module, name, stub)
