"""The operator users call: the extension built on first use, its fake implementations, ``rms_norm`` and
``RMSNorm`` (rmsnorm/__init__.py hands them out)."""

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

    # Autograd is registered in C++ (binding/rmsnorm_autograd.cpp).


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """y = x * rsqrt(mean(x^2, -1) + eps) * weight, differentiable, on CPU or CUDA."""
    extension()
    return torch.ops.rmsnorm.forward(x, weight, float(eps))[0]


class RMSNorm(torch.nn.Module):
    """Drop-in for ``torch.nn.RMSNorm`` (same constructor, defaults and results) on this
    project's kernels."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(s) for s in normalized_shape)
        if not self.normalized_shape or any(s < 1 for s in self.normalized_shape):
            raise ValueError(f"RMSNorm: expected normalized_shape of positive sizes, but got {normalized_shape!r}")
        if eps is not None and not (eps >= 0 and eps != float("inf")):
            raise ValueError(f"RMSNorm: expected eps to be None or finite and >= 0, but got {eps!r}")
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            torch.nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = len(self.normalized_shape)
        if tuple(x.shape[-k:]) != self.normalized_shape:
            raise ValueError(
                f"RMSNorm: expected input with trailing shape {list(self.normalized_shape)}, but got {list(x.shape)}"
            )
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        n = 1
        for s in self.normalized_shape:
            n *= s
        # Over the last dimension (k == 1, the usual case) the operator takes x and the weight as they
        # are: no reshapes, whose views would each add a node that autograd runs on the way back.
        flat = x if k == 1 else x.reshape(*x.shape[: x.dim() - k], n)
        if self.weight is None:
            weight = torch.ones(n, dtype=x.dtype, device=x.device)
        else:
            weight = self.weight if k == 1 else self.weight.reshape(n)
            if weight.dtype != x.dtype and weight.dtype != torch.float32:
                weight = weight.to(x.dtype)
        y = rms_norm(flat, weight, eps)
        if self.weight is not None and self.weight.dtype != x.dtype:
            # torch.nn.RMSNorm returns the promoted dtype of input and weight.
            y = y.to(torch.promote_types(x.dtype, self.weight.dtype))
        return y if k == 1 else y.reshape(x.shape)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


__all__ = ["RMSNorm", "rms_norm", "extension", "build_note"]
