"""The operator users call: the extension built on first use, its fake implementations, ``rms_norm`` and
``RMSNorm`` (rmsnorm/__init__.py hands them out, and says the rounding order they compute in)."""

from __future__ import annotations

import numbers
from types import ModuleType

import torch

from rmsnorm import _build as build

_EXT: ModuleType | None = None
_NOTE = ""


def extension() -> ModuleType:
    """The project's extension module (forward/backward, the seed card's contract)."""
    global _EXT, _NOTE
    if _EXT is None:
        spec, _NOTE = build.project_spec()
        _EXT = build.build(spec)
        _register_python_parts()
    return _EXT


def adopt(module: ModuleType, note: str) -> None:
    """Use an already-loaded build of this project's sources (the gate's mutants) as the extension,
    so that rms_norm and the fake implementations serve it."""
    global _EXT, _NOTE
    if _EXT is not None:
        raise RuntimeError(f"the extension {_EXT.__name__} is already loaded in this process")
    _EXT, _NOTE = module, note
    _register_python_parts()


def build_note() -> str:
    """One line: which kernels the loaded extension has (CUDA and CPU, or why CPU only)."""
    extension()
    return _NOTE


def _stat_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _register_python_parts() -> None:
    @torch.library.register_fake("rmsnorm::forward")
    def _forward_fake(x, weight, eps):
        y = torch.empty_like(x, memory_format=torch.contiguous_format)
        inv = x.new_empty(x.shape[:-1], dtype=_stat_dtype(x.dtype))
        return y, inv

    @torch.library.register_fake("rmsnorm::backward")
    def _backward_fake(grad_out, x, weight, inv_rms):
        return torch.empty_like(x, memory_format=torch.contiguous_format), torch.empty_like(
            weight, memory_format=torch.contiguous_format
        )


_SCALAR_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16"}


def _name(dtype: torch.dtype) -> str:
    return _SCALAR_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def _check_fused(x, weight, eps, residual, weight_offset) -> None:
    """The fused forms' arguments, checked before any is read: what was expected, what was given."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"rmsnorm: expected x to be a torch.Tensor, but got {type(x).__name__}")
    if x.dim() < 1:
        raise ValueError("rmsnorm: expected x to have at least 1 dimension, but got a 0-dim tensor")
    if x.layout != torch.strided:
        raise ValueError(f"rmsnorm: expected x to be a strided (dense) tensor, but got layout {x.layout}")
    if x.dtype not in _SCALAR_NAMES:
        raise TypeError(f"rmsnorm: expected x of dtype float32, float64, float16 or bfloat16, but got {_name(x.dtype)}")
    if x.shape[-1] < 1:
        raise ValueError(f"rmsnorm: expected the last dimension of x (N) to be at least 1, but got x of shape "
                         f"{list(x.shape)}")
    if not (abs(weight_offset) < float("inf")):
        raise ValueError(f"rmsnorm: expected weight_offset to be finite, but got {weight_offset:g}")
    if weight is None and weight_offset != 0:
        raise ValueError(f"rmsnorm: expected weight_offset 0 without a weight (y = x * inv_rms), but got "
                         f"{weight_offset!r}")
    if weight is not None:
        if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
            raise ValueError(f"rmsnorm: expected weight of shape [{x.shape[-1]}] (the last dimension of x), but got "
                             f"weight of shape {list(weight.shape)}")
        _check_beside_x("weight", weight, x)
    if not (eps >= 0 and eps < float("inf")):
        raise ValueError(f"rmsnorm: expected eps to be finite and >= 0, but got {eps!r}")
    if residual is None:
        return
    if residual.layout != torch.strided:
        raise ValueError(f"rmsnorm: expected residual to be a strided (dense) tensor, but got layout {residual.layout}")
    if residual.shape != x.shape:
        raise ValueError(f"rmsnorm: expected residual of shape {list(x.shape)} (the shape of x), but got residual of "
                         f"shape {list(residual.shape)}")
    _check_beside_x("residual", residual, x)


def _check_beside_x(name: str, t: torch.Tensor, x: torch.Tensor) -> None:
    """t (the weight or the residual) of x's dtype or float32, on x's device."""
    if t.dtype not in (x.dtype, torch.float32):
        raise TypeError(f"rmsnorm: expected {name} of dtype {_name(x.dtype)} (the dtype of x) or float32, but got "
                        f"{_name(t.dtype)}")
    if t.device != x.device:
        raise ValueError(f"rmsnorm: expected {name} on {x.device} (the device of x), but got {name} on {t.device}")


def _byte_extent(t: torch.Tensor) -> tuple[int, int]:
    """The bytes of its storage that t's elements span, [begin, end)."""
    begin = t.storage_offset() * t.element_size()
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return begin, begin + (last + 1) * t.element_size()


def _check_apart(a_name: str, a: torch.Tensor, b_name: str, b: torch.Tensor) -> None:
    """a and b share no byte of memory. Views of one storage whose spans meet are refused even where
    they share no element (x[..., ::2] and residual[..., 1::2] of one buffer): an honest limit."""
    if a.numel() == 0 or b.numel() == 0 or a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return
    what = (f"rmsnorm: expected {a_name} and {b_name} in separate memory (the in-place add writes x and residual), "
            "but got ")
    if a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride():
        raise ValueError(what + "the same memory for both")
    (a0, a1), (b0, b1) = _byte_extent(a), _byte_extent(b)
    if a0 < b1 and b0 < a1:
        raise ValueError(what + f"overlapping memory: views of one storage spanning its bytes [{a0}, {a1}) and "
                         f"[{b0}, {b1})")


def _check_in_place(x, residual, weight) -> None:
    for name, t in (("x", x), ("residual", residual)):
        if any(size > 1 and stride == 0 for size, stride in zip(t.shape, t.stride())):  # ATen's sure case
            raise ValueError(f"rmsnorm: expected {name} with one element per memory location (the in-place add "
                             f"writes it), but got {name} of shape {list(t.shape)} and strides {list(t.stride())}")
    _check_apart("x", x, "residual", residual)
    if weight is not None:
        _check_apart("x", x, "weight", weight)
        _check_apart("residual", residual, "weight", weight)


class _Sum(torch.autograd.Function):
    """s = x + residual in the statistics' dtype; its backward hands x and the residual gradients in
    memory of their own, each in its input's dtype (autograd's add would hand both one tensor where
    the dtypes match, and an in-place clip of x.grad would then scale residual.grad too)."""

    @staticmethod
    def forward(x, residual, acc):
        return x.to(acc) + residual.to(acc)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, residual, _ = inputs
        ctx.dtypes = (x.dtype, residual.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad.to(ctx.dtypes[0], copy=True), grad.to(ctx.dtypes[1], copy=True), None


def _fused(x, weight, eps, residual, weight_offset):
    """The fused forms, composed of the plain operator and ATen ops, in the declared rounding order: the
    sum and the weight plus its offset in float32 (float64 for float64 x), the plain operator on them
    (its y in that dtype), then y rounded once to x's dtype and the sum once to the residual's.
    Autograd differentiates the composition: the residual's gradient joins the sum's after the norm's
    backward (the prenorm grouping), and each gradient is cast back to its input's dtype."""
    acc = _stat_dtype(x.dtype)
    s = x.to(acc) if residual is None else _Sum.apply(x, residual, acc)
    if weight is None:
        w = torch.ones(x.shape[-1], dtype=acc, device=x.device)
    else:
        w = weight.to(acc) + weight_offset if weight_offset != 0 else weight.to(acc)
    y = torch.ops.rmsnorm.forward(s, w, float(eps))[0].to(x.dtype)
    if residual is None:
        return y, None
    return y, s.to(residual.dtype)  # s is a sum, never x's memory: where the dtypes match, s itself


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6, residual: torch.Tensor | None = None,
             weight_offset: float = 0.0, *, in_place: bool = False):
    """RMSNorm over the last dimension, differentiable, on CPU or CUDA, in the rounding order the
    module's docstring states.

    ``y = s * rsqrt(mean(s^2, -1) + eps) * (weight + weight_offset)``, ``s = x + residual`` (or ``x``).

    - ``weight``: ``[N]`` of ``x``'s dtype or float32, or None for no weight (``y = s * inv_rms``; then
      ``weight_offset`` must be 0). ``weight_offset=1.0`` is Gemma's ``1 + w``, added in float32.
    - ``residual``: None, or a tensor of ``x``'s shape, of ``x``'s dtype or float32. Then the result is
      ``(y, residual_out)``: ``residual_out`` is the sum ``s`` (summed in float32, float64 for float64
      ``x``) rounded to the residual's dtype, and ``y`` is the norm of the unrounded sum. Without a
      residual the result is ``y``. ``y`` has ``x``'s dtype.
    - ``in_place=True`` (a residual required): vLLM's ``fused_add_rms_norm``, for inference: ``y`` is
      written into ``x``'s memory and the sum into ``residual``'s, and ``(x, residual)`` is returned.
      It raises where autograd would have to record it (grad mode on and a tensor requiring grad), and
      where ``x``, ``residual`` and ``weight`` share memory.
    """
    if weight is None and weight_offset != 0:
        raise ValueError(
            f"rms_norm: expected weight_offset 0 without a weight (y = x * inv_rms), but got {weight_offset!r}"
        )
    extension()
    if in_place:
        if residual is None:
            raise ValueError("rms_norm: expected a residual with in_place=True (x <- y, residual <- x + residual), "
                             "but got residual=None")
        if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, residual, weight)):
            raise RuntimeError(
                "rms_norm: expected in_place=True only where autograd records nothing (it overwrites x and residual, "
                "for inference): run it under torch.no_grad() or torch.inference_mode(), but got grad mode on and "
                f"requires_grad x={x.requires_grad}, residual={residual.requires_grad}, "
                f"weight={weight is not None and weight.requires_grad}"
            )
        _check_fused(x, weight, eps, residual, weight_offset)
        if not torch.compiler.is_compiling():  # storage pointers cannot be traced; eager calls are checked
            _check_in_place(x, residual, weight)
        y, residual_out = _fused(x, weight, eps, residual, weight_offset)
        residual.copy_(residual_out)
        x.copy_(y)
        return x, residual
    if residual is None and weight is not None and weight_offset == 0:
        # The plain form keeps the plain operator (the same bits: s = x and w + 0 = w).
        return torch.ops.rmsnorm.forward(x, weight, float(eps))[0]
    _check_fused(x, weight, eps, residual, weight_offset)
    y, residual_out = _fused(x, weight, eps, residual, weight_offset)
    return y if residual is None else (y, residual_out)


class RMSNorm(torch.nn.Module):
    """Drop-in for ``torch.nn.RMSNorm`` (same constructor, defaults and results) on this
    project's kernels, with two additions:

    - ``weight_offset``: the weight used is ``weight + weight_offset``, the offset added in float32.
      ``weight_offset=1.0`` is Gemma's RMSNorm, whose weight is initialised to zeros; any other
      offset keeps ``torch.nn.RMSNorm``'s ones. Without a weight (``elementwise_affine=False``) the
      offset must be 0.
    - ``forward(x, residual)``: the fused residual add, returning ``(y, residual_out)`` (see
      ``rms_norm``); ``forward(x)`` returns ``y``.

    ``y`` has ``x``'s dtype, except that the plain form (no residual, offset 0) returns the dtype
    ``torch.nn.RMSNorm`` would, the promotion of ``x``'s and the weight's.
    """

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True,
                 weight_offset: float = 0.0, device=None, dtype=None) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(s) for s in normalized_shape)
        if not self.normalized_shape or any(s < 1 for s in self.normalized_shape):
            raise ValueError(f"RMSNorm: expected normalized_shape of positive sizes, but got {normalized_shape!r}")
        if eps is not None and not (eps >= 0 and eps != float("inf")):
            raise ValueError(f"RMSNorm: expected eps to be None or finite and >= 0, but got {eps!r}")
        if not (abs(weight_offset) < float("inf")):
            raise ValueError(f"RMSNorm: expected weight_offset to be finite, but got {weight_offset!r}")
        if not elementwise_affine and weight_offset != 0:
            raise ValueError(f"RMSNorm: expected weight_offset 0 without a weight (elementwise_affine=False), "
                             f"but got {weight_offset!r}")
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.weight_offset = float(weight_offset)
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            if self.weight_offset == 1.0:
                torch.nn.init.zeros_(self.weight)  # Gemma: 1 + w starts at 1
            else:
                torch.nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        k = len(self.normalized_shape)
        if tuple(x.shape[-k:]) != self.normalized_shape:
            raise ValueError(
                f"RMSNorm: expected input with trailing shape {list(self.normalized_shape)}, but got {list(x.shape)}"
            )
        if residual is not None and residual.shape != x.shape:
            raise ValueError(f"RMSNorm: expected residual of the input's shape {list(x.shape)}, but got "
                             f"{list(residual.shape)}")
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        n = 1
        for s in self.normalized_shape:
            n *= s
        # Over the last dimension (k == 1, the usual case) the operator takes x and the weight as they
        # are: no reshapes, whose views would each add a node that autograd runs on the way back.
        flat = x if k == 1 else x.reshape(*x.shape[: x.dim() - k], n)
        flat_residual = residual if residual is None or k == 1 else residual.reshape(flat.shape)
        weight = None
        if self.weight is not None:
            weight = self.weight if k == 1 else self.weight.reshape(n)
            if weight.dtype != x.dtype and weight.dtype != torch.float32:
                weight = weight.to(x.dtype)
        if flat_residual is not None:
            y, residual_out = rms_norm(flat, weight, eps, flat_residual, self.weight_offset)
            return (y, residual_out) if k == 1 else (y.reshape(x.shape), residual_out.reshape(x.shape))
        y = rms_norm(flat, weight, eps, None, self.weight_offset)
        if self.weight is not None and self.weight.dtype != x.dtype and self.weight_offset == 0:
            # torch.nn.RMSNorm returns the promoted dtype of input and weight.
            y = y.to(torch.promote_types(x.dtype, self.weight.dtype))
        return y if k == 1 else y.reshape(x.shape)

    def extra_repr(self) -> str:
        offset = f", weight_offset={self.weight_offset}" if self.weight_offset else ""
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}{offset}"


__all__ = ["RMSNorm", "rms_norm", "extension", "build_note"]
