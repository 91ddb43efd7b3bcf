"""RMSNorm for PyTorch on this project's C++/CUDA kernels: ``RMSNorm`` (a drop-in for
``torch.nn.RMSNorm``) and ``rms_norm`` (the functional form), both differentiable.

    import torch
    from rmsnorm import RMSNorm, rms_norm

The first use builds the extension (``torch.utils.cpp_extension.load``; CUDA kernels for the visible
GPUs, or sm_90 when none, when a CUDA toolkit and a CUDA build of torch are there; otherwise CPU
only) and caches it; later uses load it. It registers ``torch.ops.rmsnorm.forward`` (with its
autograd) and ``torch.ops.rmsnorm.backward``; this package adds their fake (meta)
implementations, so that ``torch.compile(fullgraph=True)`` and ``torch.library.opcheck`` work.

The names are loaded on first use (rmsnorm._op): ``import rmsnorm`` alone does not import torch, so
that the build helpers (rmsnorm._buildenv) serve light callers, such as a pytest plugin that is
installed into every pytest run of an environment.
"""

from __future__ import annotations

__all__ = ["RMSNorm", "rms_norm", "extension", "build_note", "adopt"]


def __getattr__(name: str):
    if name in __all__:
        from rmsnorm import _op  # torch and the operator, on first use of a public name

        return getattr(_op, name)
    raise AttributeError(f"module 'rmsnorm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
