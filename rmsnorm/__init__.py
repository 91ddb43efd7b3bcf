"""RMSNorm for PyTorch on this project's C++/CUDA kernels: ``RMSNorm`` (a drop-in for
``torch.nn.RMSNorm``, with the fused residual add and Gemma's ``1 + w`` besides) and ``rms_norm``
(the functional form), both differentiable.

    import torch
    from rmsnorm import RMSNorm, rms_norm

    y = rms_norm(x, weight)                                   # x * rsqrt(mean(x^2) + eps) * weight
    y, residual = rms_norm(x, weight, residual=residual)      # the norm of x + residual, and that sum
    y = rms_norm(x, weight, weight_offset=1.0)                # Gemma: * (1 + weight)
    x, residual = rms_norm(x, weight, residual=residual, in_place=True)  # vLLM's fused_add_rms_norm

The first use builds the extension (``torch.utils.cpp_extension.load``; CUDA kernels for the visible
GPUs, or sm_90 when none, when a CUDA toolkit and a CUDA build of torch are there; otherwise CPU
only) and caches it; later uses load it. It registers ``torch.ops.rmsnorm.forward`` (with its
autograd) and ``torch.ops.rmsnorm.backward``; this package adds their fake (meta) implementations, so
that ``torch.compile(fullgraph=True)`` and ``torch.library.opcheck`` work. The fused forms (a residual,
a weight offset, no weight) are composed of that operator and ATen ops, on CPU and CUDA alike: correct
and differentiable, at more passes over memory than a fused kernel would make.

The rounding order, the same on CPU and CUDA:

1. Statistics in float32 (float64 for float64 ``x``).
2. With a residual, ``s = x + residual`` is summed in that dtype and that unrounded sum is what is
   normalised (as vLLM's native path, FlashInfer, flash-attn and quack do; not HF eager's or
   Liger's order, which normalise the sum rounded to the residual's dtype). ``residual_out`` is
   ``s`` rounded once to the residual's dtype, which may be ``x``'s or float32 (a float32 residual
   stream beside 16-bit ``x`` keeps the sum in float32). Without a residual, ``s = x``.
3. ``y = s * inv_rms * (w + weight_offset)``, with ``w`` promoted to float32 (float64) before the
   offset is added (never ``1 + w`` in bfloat16), rounded once to ``x``'s dtype; ``y = s * inv_rms``
   without a weight.

Gradients: with ``g_s = grad_residual_out + (dy/ds)^T grad_y`` (the prenorm grouping: the
residual's gradient is added after the norm's backward, not passed through it), ``grad_x`` is
``g_s`` in ``x``'s dtype, ``grad_residual`` is ``g_s`` in the residual's dtype and ``grad_weight``
is the sum over rows of ``grad_y * s * inv_rms``, in the weight's dtype.
"""

from __future__ import annotations

__all__ = ["RMSNorm", "rms_norm", "extension", "build_note", "adopt"]


def __getattr__(name: str):
    # The names load on first use (rmsnorm._op): import rmsnorm alone imports no torch, so that the build
    # helpers (rmsnorm._buildenv) serve light callers, such as a pytest plugin installed into every run.
    if name in __all__:
        from rmsnorm import _op  # torch and the operator, on first use of a public name

        return getattr(_op, name)
    raise AttributeError(f"module 'rmsnorm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
