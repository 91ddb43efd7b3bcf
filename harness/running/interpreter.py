"""Running a target's Triton kernels under Triton's interpreter, in its worker process (a CPU run of
Triton code: harness.running.spec.TargetSpec.interpreted).

The worker sets TRITON_INTERPRET=1 before it imports the target (triton.jit reads it when a kernel
is decorated), then, for the rest of its life:

  shims          two patches that let kernels written for the compiled path run (float_scalars_have_to,
                 libdevice_as_tl_math); each changes nothing for a kernel that runs without it
  bfloat16 watch notes a kernel computing on bfloat16 values: Triton 3.8's interpreter stores them as
                 uint16 and numpy computes on the bit patterns ([1.5, 2] * [2, 3] gave [0, 0]), and it
                 truncates float32 -> bfloat16 where the compiled path rounds to nearest even; such a
                 kernel's bfloat16 cannot be judged here (harness.judging.target.NotJudged)
  probe          its first calls, timed: the speed the case time limit is set from (case_limit), and
                 whether its bfloat16 can be judged and whether the interpreter runs it at all

Written against triton 3.8.0's interpreter; a shim refuses (ValueError) an interpreter without what it
patches.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

ENV = "TRITON_INTERPRET"

# The case time limit under the interpreter: the measured cost of the case's size, times CALLS (the
# forward-and-backward pairs one law makes on a case at most: bad_inputs_raise_cleanly 13 forwards
# and 13 checked ones, after_neighbours up to 6 pairs, gradcheck some 45 pairs of at most 3 x 8),
# times MULTIPLE (room for a machine shared with other work), and never below FLOOR_S.
CALLS = 16
MULTIPLE = 10
FLOOR_S = 30.0

SHIMS = ("float arguments get the .to() of the compiled path's float32 scalar (float_scalars_have_to)",
         "libdevice calls reach tl.math's function of the same name, not a stub that returns None "
         "(libdevice_as_tl_math)")


def case_limit(speed: dict | None, rows: int, n: int, default_s: float) -> float:
    """Seconds one law may take on a case of rows x n before it counts as a hang: MULTIPLE x CALLS x the
    measured cost of a forward and backward of that size (rows x (row_s + n x element_s), each an upper
    bound measured by the worker's first calls), at least FLOOR_S; default_s where nothing was measured."""
    if not speed:
        return default_s
    pair = max(1, rows) * (speed["row_s"] + n * speed["element_s"])
    return max(FLOOR_S, MULTIPLE * CALLS * pair)


def describe_limit(speed: dict | None) -> str:
    """The rule of case_limit in words, with what the worker measured."""
    if not speed:
        return "hang limit: the default (the worker's first calls were not timed)"
    return (f"hang limit: {MULTIPLE} x {CALLS} calls x the measured cost of a forward and backward of the case's "
            f"size (rows x ({speed['row_s'] * 1e3:.1f} ms + N x {speed['element_s'] * 1e6:.2f} us), measured by the "
            f"worker's first calls), at least {FLOOR_S:.0f} s")


# -- the shims -------------------------------------------------------------------------------------

def _interpreter():
    from triton.runtime import interpreter  # only in a worker that runs Triton code

    return interpreter


def _interpreted_float():
    import numpy as np
    import triton.language as tl

    interpreter = _interpreter()

    class InterpretedFloat(float):
        """A float kernel argument under the interpreter, with the .to of the compiled path's float32 scalar."""

        def to(self, dtype, fp_downcast_rounding=None, bitcast=False):
            scalar = tl.tensor(interpreter.TensorHandle(np.array([float(self)], dtype=np.float32), tl.float32),
                               tl.float32)
            return scalar.to(dtype, fp_downcast_rounding=fp_downcast_rounding, bitcast=bitcast)

    return InterpretedFloat


@contextlib.contextmanager
def float_scalars_have_to():
    """Within the block, float arguments of interpreted kernels get .to(dtype, ...).

    Compiled, a Python float passed to a @triton.jit kernel arrives as a float32 scalar tensor, so
    kernels write ``eps = eps.to(tl.float32)`` (Liger-Kernel's RMSNorm does). Triton 3.8's interpreter
    hands it over as a Python float (its _implicit_cvt wraps bools, ints, tensors, tuples and tensor
    descriptors only), and the kernel fails with InterpreterError: AttributeError("'float' object has no
    attribute 'to'"). The patched _implicit_cvt makes each float argument an InterpretedFloat: a float
    (every operation on it and every isinstance check in Triton's semantics unchanged) with .to, which
    builds the float32 scalar the compiled path passes (the value rounded to float32) and converts it as
    tl.tensor.to does. A kernel that never calls .to on a float argument computes what it did without it.
    Only .to is given; arithmetic keeps a Python float's semantics (a weakly typed scalar). The patch is
    of a module global (every kernel launched in the process), undone on leaving the block."""
    interpreter = _interpreter()
    original = getattr(interpreter, "_implicit_cvt", None)
    if original is None:
        raise ValueError("float_scalars_have_to: expected triton.runtime.interpreter._implicit_cvt (triton 3.8), "
                         "but this triton's interpreter has none")
    interpreted_float = _interpreted_float()

    def implicit_cvt(arg):
        if isinstance(arg, float) and not isinstance(arg, interpreted_float):
            return interpreted_float(arg)
        return original(arg)

    interpreter._implicit_cvt = implicit_cvt
    try:
        yield
    finally:
        interpreter._implicit_cvt = original


LIBDEVICE = "triton.language.extra.libdevice"


@contextlib.contextmanager
def libdevice_as_tl_math():
    """Within the block, a kernel's module-level names bound to a libdevice function that tl.math also has
    (rsqrt, sqrt, exp, log, floor, ...) are bound to tl.math's while the kernel runs.

    triton.language.extra.libdevice holds stubs whose bodies are ``...``: compiling, the backend maps the
    module to its device library; the interpreter does not, so a stub runs and returns None, and the
    kernel fails where it uses the result (Liger-Kernel's ``rstd = rsqrt(...)``, then its store:
    InterpreterError: TypeError("cannot convert None of type <class 'NoneType'> to tensor")). The patched
    triton.runtime.interpreter._patch_lang, which the interpreter calls before it runs a kernel or a
    device function, rebinds each such global through the scope it restores after the kernel; leaving the
    block sets every one back too. Stubs without a tl.math namesake (tanh, pow, isnan) still return None,
    and a stub reached as an attribute (libdevice.rsqrt(x)) is not rebound."""
    import triton.language as tl

    interpreter = _interpreter()
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


# -- the bfloat16 watch ------------------------------------------------------------------------------

# What the watch saw since it was last cleared: the first operation on bfloat16 values, and where.
SEEN: list[str] = []
_SAFE_OPS = ("bitwise_and", "bitwise_or", "bitwise_xor", "where")  # exact on bit patterns


def _kernel_frame() -> str:
    """ at FILE line N: the innermost frame outside Triton's package (the kernel's line being run)."""
    import triton

    package = os.path.dirname(triton.__file__) + os.sep
    f = sys._getframe(2)
    while f is not None and (f.f_code.co_filename.startswith(package) or f.f_code.co_filename == __file__):
        f = f.f_back
    if f is None:
        return ""
    path = f.f_code.co_filename
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        path = path.split(marker, 1)[1] if marker in path else path
    cwd = os.getcwd() + os.sep
    return f" at {path[len(cwd):] if path.startswith(cwd) else path} line {f.f_lineno}"


def _note(what: str) -> None:
    if not SEEN:
        SEEN.append(what + _kernel_frame())


@contextlib.contextmanager
def watch_bfloat16():
    """Within the block, SEEN gets the first arithmetic on bfloat16 values the interpreter does (an
    operation of numpy's on their uint16 bit patterns: anything but a select or a bitwise and, or, xor),
    and the first float32 -> bfloat16 conversion that the interpreter's truncation gets wrong (a value
    not already a bfloat16 one). Exact conversions (a kernel that rounds by hand, then converts) and
    widening bfloat16 to float32 are what a kernel does right, and are not noted."""
    import numpy as np
    import triton.language as tl

    builder = _interpreter().InterpreterBuilder
    saved = {name: builder.__dict__[name] for name in ("binary_op", "unary_op", "ternary_op", "create_fma",
                                                        "cast_impl", "create_fp_to_fp")}
    bf16 = tl.bfloat16

    def is_bf16(h) -> bool:
        return getattr(getattr(h, "dtype", None), "scalar", None) == bf16

    def binary_op(self, lhs, rhs, op):
        if (is_bf16(lhs) or is_bf16(rhs)) and getattr(op, "__name__", "") not in _SAFE_OPS:
            _note(f"{getattr(op, '__name__', 'an operation')} of bfloat16 values")
        return saved["binary_op"](self, lhs, rhs, op)

    def unary_op(self, arg, op):
        if is_bf16(arg):
            _note(f"{getattr(op, '__name__', 'an operation')} of bfloat16 values")
        return saved["unary_op"](self, arg, op)

    def ternary_op(self, lhs, rhs, other, op):
        if (is_bf16(lhs) or is_bf16(rhs) or is_bf16(other)) and getattr(op, "__name__", "") not in _SAFE_OPS:
            _note(f"{getattr(op, '__name__', 'an operation')} of bfloat16 values")
        return saved["ternary_op"](self, lhs, rhs, other, op)

    def create_fma(self, x, y, z):
        if is_bf16(x) or is_bf16(y) or is_bf16(z):
            _note("a fused multiply-add of bfloat16 values")
        return saved["create_fma"](self, x, y, z)

    def narrowing(src, dst_type) -> None:
        if getattr(dst_type, "scalar", None) == bf16 and getattr(src.dtype, "scalar", None) == tl.float32:
            low = np.asarray(src.data).view(np.uint32) & np.uint32(0xFFFF)
            finite = (np.asarray(src.data).view(np.uint32) & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
            if bool((low.astype(bool) & finite).any()):
                _note("a float32 -> bfloat16 conversion the interpreter truncates")

    def cast_impl(self, src, dst_type):
        narrowing(src, dst_type)
        return saved["cast_impl"](self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        narrowing(src, dst_type)
        return saved["create_fp_to_fp"](self, src, dst_type, rounding_mode)

    patched = {"binary_op": binary_op, "unary_op": unary_op, "ternary_op": ternary_op, "create_fma": create_fma,
               "cast_impl": cast_impl, "create_fp_to_fp": create_fp_to_fp}
    for name, fn in patched.items():
        setattr(builder, name, fn)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(builder, name, fn)


def bfloat16_not_judged(seen: str) -> str:
    """Why a target's bfloat16 is not judged under the interpreter, from what the watch saw."""
    return (f"its kernel does bfloat16 arithmetic or conversions (first: {seen}), which Triton 3.8's interpreter does "
            "unlike the compiled path (arithmetic on the values' raw uint16 bits, float32 -> bfloat16 truncated "
            "instead of rounded to nearest even): bfloat16 cannot be judged under the interpreter; judge it "
            "compiled, on a GPU")


_INSTALLED: list[contextlib.ExitStack] = []  # held: a context manager's generator collected would undo its patch


def install() -> None:
    """The shims and the bfloat16 watch, for the rest of this process's life (a worker's)."""
    stack = contextlib.ExitStack()
    stack.enter_context(float_scalars_have_to())
    stack.enter_context(libdevice_as_tl_math())
    stack.enter_context(watch_bfloat16())
    _INSTALLED.append(stack)


# -- the probe ---------------------------------------------------------------------------------------

PROBE_DTYPES = ("float32", "float16", "float64", "bfloat16")  # the first the contract allows is timed


def probe(target, declared: dict | None) -> dict:
    """The worker's first calls of an interpreted target: {"speed": {"row_s", "element_s"} or None,
    "not_judged": {dtype: why}, "cannot_interpret": message or None}. Each call is made through the
    target as a law makes it (harness.judging.target.Target); a refusal leaves that part unmeasured."""
    from harness.judging.cases import Case, materialize
    from harness.judging.contract import Contract
    from harness.judging.target import CannotInterpret, Crashed, LawFailure, Rejected

    c = Contract.from_dict(declared, "probe") if declared else Contract()
    out: dict = {"speed": None, "not_judged": {}, "cannot_interpret": None}
    dtypes = [d for d in PROBE_DTYPES if d in c.dtypes]
    if not dtypes:
        return out

    def pair(case: Case) -> float:
        t = materialize(case, target.device)
        t0 = time.perf_counter()
        _, inv = target.forward(t.x, t.weight, case.eps)
        if target.has_backward:
            if inv is None:
                import torch

                x64 = t.x.to(torch.float64)
                inv = torch.rsqrt((x64 * x64).mean(-1) + case.eps).to(
                    torch.float64 if case.dtype == "float64" else torch.float32)
            target.backward(t.grad_out, t.x, t.weight, inv)
        return time.perf_counter() - t0

    def case(shape, dtype) -> Case:
        wdt = dtype if "same" in c.weight_dtypes else "float32"
        n = shape[-1] // c.n_multiple_of * c.n_multiple_of or c.n_multiple_of
        return Case(shape=shape[:-1] + (n,), dtype=dtype, weight_dtype=wdt)

    try:
        timed = dtypes[0]
        pair(case((3, 8), timed))  # the first call of each kernel reads and rewrites its source: not timed
        rows_t = pair(case((8, 64), timed)) / 8
        n_long = min(8192, c.max_n_for(timed))
        long_t = pair(case((2, n_long), timed)) / (2 * n_long)
        out["speed"] = {"row_s": rows_t, "element_s": long_t, "dtype": timed}
    except CannotInterpret as e:
        out["cannot_interpret"] = str(e)
        return out
    except (Rejected, Crashed, LawFailure):
        pass  # refused, or wrong: the laws judge it; the limit stays the default
    if "bfloat16" in c.dtypes:
        for wdt in [w for w in ("same", "float32") if w in c.weight_dtypes]:
            SEEN.clear()
            try:
                pair(Case(shape=(3, 37), dtype="bfloat16", weight_dtype="bfloat16" if wdt == "same" else "float32"))
            except CannotInterpret as e:
                out["cannot_interpret"] = str(e)
                return out
            except (Rejected, Crashed, LawFailure):
                continue
            if SEEN:
                out["not_judged"]["bfloat16"] = bfloat16_not_judged(SEEN[0])
                break
    SEEN.clear()
    return out
