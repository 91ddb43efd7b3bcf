"""The target as the laws see it: its calls (the seed card's forward and backward), each answer's form
checked, and every exception sorted into a refusal (Rejected) or a crash (Crashed); and the outcomes a
law ends in (LawFailure, NotApplicable, NoRoom). harness.running.loading builds and imports it."""

from __future__ import annotations

import os
import re
import time
import traceback
from dataclasses import dataclass, field
from types import ModuleType

import torch



BREADCRUMB = None  # shared memory (set in the worker) naming the call into the target under way


def _mark(what: str) -> None:
    if BREADCRUMB is not None:
        BREADCRUMB.value = what.encode()[:511]


class Rejected(Exception):
    """The target raised a clean exception for an input: allowed unless the run is strict."""


class Crashed(Exception):
    """The target raised a CUDA error, or broke the process or the CUDA context: always a failure.
    The worker restarts unless the context still runs kernels (Target.context_usable)."""


class LawFailure(AssertionError):
    """The target returned a wrong answer (or broke a law)."""


class NotApplicable(Exception):
    """The law does not apply to this target or device."""


class NotJudged(Exception):
    """The case cannot be judged where it runs: under Triton's interpreter, a kernel that computes on
    bfloat16 values gets the interpreter's arithmetic on their raw bits, not the kernel's. Neither a
    pass nor a failure; the run draws no more of its dtype, and its report says so."""

    def __init__(self, why: str, dtype: str) -> None:
        super().__init__(why)
        self.dtype = dtype


class CannotInterpret(Exception):
    """Triton's interpreter could not run the target's kernel (an InterpreterError the kernel's own
    assertion did not raise): the target is not judged at all, neither failed nor passed."""


class NoRoom(Exception):
    """The case needs more GPU memory than this GPU has free: the law applies, but the case is not run
    here. Neither the target's failure nor a refusal of the input (a smaller GPU, or other processes
    holding memory, as the lane's gates side by side do)."""


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def plain(text: str) -> str:
    """A target's message without terminal escape codes (colours a compiler put in its error)."""
    return _ANSI.sub("", text)


_CUDA_ERROR = re.compile(
    r"CUDA error|cudaError|illegal memory access|device-side assert|misaligned address|"
    r"unspecified launch failure|an illegal instruction|CUDA driver error|CUBLAS_STATUS|"
    r"operation not permitted when stream is capturing",
    re.I,
)


_SHORT_OF_MEMORY = re.compile(r"out of memory|cudaErrorMemoryAllocation|"
                              r"CUDA-capable device\(s\) is/are busy or unavailable", re.I)
_TRIED = re.compile(r"Tried to allocate ([0-9.]+) (GiB|MiB|KiB|B)\b")
_UNITS = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "B": 1}


def short_of_memory(e: BaseException, total: int) -> bool:
    """Whether e says the GPU had too little free memory when the case ran, memory that other processes
    on it may hold: torch's OutOfMemoryError, an uncached allocation's CUDA error, a context that could not
    be made, or a refusal or crash of the target that carries one. Not an allocation larger than the whole
    card (total bytes): no wait makes room for that, and asking for it is the target's fault. Not NoRoom
    either: a law that says so has judged the room already (beyond_2_31_elements)."""
    if isinstance(e, (KeyboardInterrupt, SystemExit, NoRoom)):
        return False
    text = str(e)
    if not isinstance(e, torch.cuda.OutOfMemoryError) and not _SHORT_OF_MEMORY.search(text):
        return False
    tried = _TRIED.search(text)
    return tried is None or float(tried.group(1)) * _UNITS[tried.group(2)] <= total


def run_while_short_of_memory(run, *, total: int, wait_s: float, step_s: float, sleep=time.sleep, before_wait=None):
    """run(), again every step_s while it runs short of GPU memory (short_of_memory, a card of total bytes),
    until wait_s have passed; then that error is raised. before_wait(error, waited_s) is called before each
    wait. Returns run's result and how many times it waited."""
    waited = 0.0
    waits = 0
    while True:
        try:
            return run(), waits
        except BaseException as e:  # noqa: BLE001 - re-raised unless short of memory with time to wait
            if not short_of_memory(e, total) or waited + step_s > wait_s:
                raise
            if before_wait is not None:
                before_wait(e, waited)
            sleep(step_s)
            waited += step_s
            waits += 1


class EpsMemo:
    """The card's backward gets inv_rms, not eps; a target differentiated through its forward needs eps.
    Forward records it by x's identity (pointer, shape, strides, dtype); a backward whose x no forward saw
    (a bad-input call) recovers eps per row from inv_rms instead."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._eps: dict[tuple, float] = {}

    @staticmethod
    def _key(x):
        return (x.device, x.dtype, x.data_ptr(), tuple(x.shape), tuple(x.stride()))

    def record(self, x, eps: float) -> None:
        self._eps.pop(self._key(x), None)
        self._eps[self._key(x)] = eps
        while len(self._eps) > self.size:
            self._eps.pop(next(iter(self._eps)))

    def eps_for(self, x, inv_rms):
        eps = self._eps.get(self._key(x))
        if eps is not None:
            return eps
        x64 = x.detach().to(torch.float64)
        ms = (x64 * x64).mean(-1, keepdim=True)
        inv = inv_rms.detach().to(torch.float64).reshape(ms.shape)
        return (1 / (inv * inv) - ms).clamp_min(0).to(torch.promote_types(x.dtype, torch.float32))


@dataclass
class Target:
    module: ModuleType
    spec: object  # harness.running.spec.TargetSpec: which target (the laws ask it what kind)
    device: torch.device
    strict: bool
    has_ops: bool
    note: str
    # (row length N, whether this is the first call of its kind at this signature, seconds) of each
    # call into the target since the worker last collected them: what tells a target that compiles
    # on first use (its first calls at a new signature much slower than the rest) from one that
    # does not. A signature: forward or backward, N, the dtypes, x's strides and eps.
    calls: list = None  # type: ignore[assignment]
    _seen: set = None  # type: ignore[assignment]
    variant: object = None  # harness.judging.variant.Variant: the RMSNorm its contract says it is
    interpreted: bool = False  # its kernels run under Triton's interpreter (harness.running.spec)
    # dtype -> why its calls are not judged where they run (NotJudged): the calls of x in it are not made.
    not_judged: dict = field(default_factory=dict)
    # The module has no backward, but its forward's y carries a graph (an autograd.Function, torch ops), which
    # a model trains through: the backward laws judge torch.autograd.grad of it, with the eps of the forward
    # that saw x (harness.running.loading's probe sets this).
    grads_by_autograd: bool = False
    _eps: EpsMemo = field(default_factory=EpsMemo)

    def __post_init__(self) -> None:
        self.calls, self._seen = [], set()

    @property
    def has_backward(self) -> bool:
        return self.own_backward or self.grads_by_autograd

    @property
    def own_backward(self) -> bool:
        """The module has the card's backward(grad_out, x, weight, inv_rms) (not only autograd through forward)."""
        return callable(getattr(self.module, "backward", None))

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def sync(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def _signature(self, what: str, args) -> tuple | None:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        x = tensors[1] if what == "backward" and len(tensors) > 1 else (tensors[0] if tensors else None)
        if x is None or x.dim() == 0:
            return None
        eps = next((a for a in args if isinstance(a, float)), None)
        return (what, tuple(x.shape[-1:]), tuple(t.dtype for t in tensors), tuple(x.stride()), x.dim(), eps)

    def call(self, what: str, fn, *args):
        """Call into the target; sort any exception into Rejected or Crashed (under Triton's interpreter,
        CannotInterpret where the interpreter could not run the kernel)."""
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        x = tensors[1] if what.startswith("backward") and len(tensors) > 1 else (tensors[0] if tensors else None)
        dtype = str(x.dtype).replace("torch.", "") if x is not None else ""
        if dtype in self.not_judged:
            raise NotJudged(self.not_judged[dtype], dtype)
        _mark(what)
        sig = self._signature(what, args) if what in ("forward", "backward") else None
        first = sig is not None and sig not in self._seen
        t0 = time.perf_counter()
        try:
            out = fn(*args)
            if self.is_cuda:
                self._probe(what)
            if sig is not None:
                self._seen.add(sig)
                self.calls.append((sig[1][0], first, time.perf_counter() - t0))
        except (Crashed, LawFailure):
            raise
        except Exception as e:  # noqa: BLE001 - any exception is data about the target
            first_line = plain(str(e)).strip().splitlines()[0] if str(e).strip() else ""
            msg = f"{what} raised {type(e).__name__}: {first_line}"
            if self.interpreted and type(e).__name__ == "InterpreterError":
                cause = e.__cause__
                where = kernel_line(cause if cause is not None else e)
                if isinstance(cause, AssertionError):  # the kernel's own tl.device_assert: a crash, as on a GPU
                    raise Crashed(f"{msg}{where}") from None
                raise CannotInterpret(f"{what}: {type(e).__name__}: {first_line}{where}") from None
            if self.is_cuda:
                if _CUDA_ERROR.search(str(e)):
                    raise Crashed(msg) from None
                try:
                    torch.cuda.synchronize(self.device)
                except Exception as e2:  # noqa: BLE001
                    raise Crashed(f"{msg}; then the CUDA context was broken: {e2}") from None
            raise Rejected(msg) from None
        finally:
            _mark("")
        return out

    def _probe(self, what: str) -> None:
        """After a call that returned: wait for its kernels, then launch one of ours, which
        surfaces an error the target left pending (an unchecked failed launch) or a broken
        context. Either is the target's failure, reported as a crash."""
        try:
            self._run_a_kernel()
        except Exception as e:  # noqa: BLE001
            raise Crashed(f"{what} returned but left a CUDA error behind: {str(e).strip().splitlines()[0]}") from None

    def _run_a_kernel(self) -> None:
        torch.cuda.synchronize(self.device)
        torch.ones(1, device=self.device).add_(1)
        torch.cuda.synchronize(self.device)

    def context_usable(self) -> bool:
        """After a CUDA error has been raised (which clears one that is not sticky): does the
        context still run a kernel? A sticky error (an illegal address, a device-side assert)
        fails every call from then on."""
        try:
            self._run_a_kernel()
            return True
        except Exception:  # noqa: BLE001
            return False

    def forward(self, x, weight, eps):
        """(y, inv_rms or None), with the outputs' form checked."""
        if self.grads_by_autograd:
            self._eps.record(x, eps)
        out = self.call("forward", self.module.forward, x, weight, eps)
        if isinstance(out, torch.Tensor):
            y, inv = out, None
        elif isinstance(out, (tuple, list)) and len(out) >= 1 and isinstance(out[0], torch.Tensor):
            y = out[0]
            inv = out[1] if len(out) > 1 and isinstance(out[1], torch.Tensor) else None
        else:
            raise LawFailure(f"forward returned {type(out).__name__}; expected a Tensor or (y, inv_rms)")
        if y.numel() and _same_memory(y, x):
            raise LawFailure("forward returned y in the memory of its input x (x itself or a view of it): the "
                             "caller's x changes whenever y is written, and y whenever x is")
        # A wider y is what promotion gives (HF's float32 weight times a 16-bit x is float32), nothing wider.
        wider = (torch.promote_types(x.dtype, weight.dtype),) if isinstance(weight, torch.Tensor) else ()
        check_output("y", y, tuple(x.shape), x.dtype, x.device, allow_wider=not self.strict, wider=wider)
        if inv is not None:
            lead = tuple(x.shape[:-1])
            rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
            if self.strict:
                acc = torch.float64 if x.dtype == torch.float64 else torch.float32
                check_output("inv_rms", inv, lead, acc, x.device)
            elif tuple(inv.shape) not in (lead, lead + (1,), (rows,)) or inv.device != x.device:
                raise LawFailure(
                    f"inv_rms: expected shape {list(lead)} (or with a trailing 1, or [{rows}]) on {x.device}, "
                    f"but got {list(inv.shape)} on {inv.device}"
                )
        return y, inv

    def backward(self, grad_out, x, weight, inv):
        if not self.has_backward:
            raise NotApplicable("target has no backward, and its forward's output carries no autograd graph")
        fn = self.module.backward if self.own_backward else self._autograd_backward
        out = self.call("backward", fn, grad_out, x, weight, inv)
        if not (isinstance(out, (tuple, list)) and len(out) >= 2):
            raise LawFailure(f"backward returned {type(out).__name__}; expected (grad_x, grad_weight)")
        gx, gw = out[0], out[1]
        for gname, g in (("grad_x", gx), ("grad_weight", gw)):
            for iname, t in (("grad_out", grad_out), ("x", x), ("weight", weight), ("inv_rms", inv)):
                if isinstance(g, torch.Tensor) and isinstance(t, torch.Tensor) and g.numel() and _same_memory(g, t):
                    raise LawFailure(f"backward returned {gname} in the memory of its input {iname}: it overwrites "
                                     f"{iname} in place")
        check_output("grad_x", gx, tuple(x.shape), x.dtype, x.device, allow_wider=not self.strict)
        check_output("grad_weight", gw, tuple(weight.shape), weight.dtype, weight.device, allow_wider=not self.strict)
        return gx, gw

    def _autograd_backward(self, grad_out, x, weight, inv):
        """grads_through the module's forward, with the eps of the forward that saw x."""
        eps = self._eps.eps_for(x, inv)
        if isinstance(eps, torch.Tensor):  # no forward saw this x: the eps its inv_rms implies, one value
            eps = float(eps.flatten().median()) if eps.numel() else 0.0
        return grads_through(self.module.forward, grad_out, x, weight, eps)


def grads_through(forward, grad_out, x, weight, eps):
    """(grad_x, grad_weight) by torch.autograd.grad of y = forward(x, weight, eps) (or its first output), as a
    model trains through it; a gradient autograd leaves unset (an input the graph does not reach) is zeros,
    which the laws judge."""
    with torch.enable_grad():
        xg = x.detach().requires_grad_()
        wg = weight.detach().requires_grad_()
        out = forward(xg, wg, eps)
        y = out if isinstance(out, torch.Tensor) else out[0]
        gx, gw = torch.autograd.grad(y, (xg, wg), grad_out.to(y.dtype), allow_unused=True)
    return (torch.zeros_like(x) if gx is None else gx), (torch.zeros_like(weight) if gw is None else gw)


def differentiable_forward(module, device: torch.device) -> bool:
    """Whether a module without a backward has a forward whose y carries an autograd graph: tried on two rows
    of 8 in the first dtype it accepts (float32, float64, bfloat16, float16)."""
    if callable(getattr(module, "backward", None)):
        return False
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        x = torch.randn(2, 8, device=device, dtype=dtype).requires_grad_()
        w = torch.ones(8, device=device, dtype=dtype).requires_grad_()
        try:
            with torch.enable_grad():
                out = module.forward(x, w, 1e-6)
        except Exception:  # noqa: BLE001 - a refusal of this dtype: the next one
            continue
        y = out if isinstance(out, torch.Tensor) else (
            out[0] if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor) else None)
        return y is not None and y.requires_grad
    return False


def kernel_line(e: BaseException) -> str:
    """ " at FILE line N: TEXT" of the innermost frame of e's traceback outside Triton's own package (the
    kernel's line the interpreter was running), or "" where there is none."""
    try:
        import triton  # only for an interpreted target's exception: where its package lies

        package = os.path.dirname(triton.__file__) + os.sep
    except ImportError:
        return ""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith(package)]
    if not frames:
        return ""
    f = frames[-1]
    text = f": {f.line.strip()}" if f.line else ""
    return f" at {_short_path(f.filename)} line {f.lineno}{text}"


def _short_path(path: str) -> str:
    """path from site-packages (a library's file) or from the current folder (the user's), else as it is."""
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        if marker in path:
            return path.split(marker, 1)[1]
    cwd = os.getcwd() + os.sep
    return path[len(cwd):] if path.startswith(cwd) else path


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


_WIDER = {torch.float16: (torch.float32, torch.float64), torch.bfloat16: (torch.float32, torch.float64),
          torch.float32: (torch.float64,), torch.float64: ()}


def check_output(name, t, shape, dtype, device, *, allow_wider: bool = False, wider: tuple | None = None) -> None:
    """Shape, device and dtype of an output. allow_wider (targets other than this project):
    a wider float dtype is accepted (e.g. float32 gradients for a bfloat16 weight, which
    autograd casts back), only those in wider where it is given; its values are still compared."""
    if not isinstance(t, torch.Tensor):
        raise LawFailure(f"{name}: expected a Tensor, but got {type(t).__name__}")
    problems = []
    if tuple(t.shape) != tuple(shape):
        problems.append(f"shape {list(shape)}, got {list(t.shape)}")
    allowed = _WIDER.get(dtype, ()) if wider is None else tuple(d for d in wider if d in _WIDER.get(dtype, ()))
    if t.dtype != dtype and not (allow_wider and t.dtype in allowed):
        problems.append(f"dtype {dtype}, got {t.dtype}")
    if t.device != torch.device(device):
        problems.append(f"device {device}, got {t.device}")
    if problems:
        raise LawFailure(f"{name}: expected " + "; expected ".join(problems))


