"""The law registry: each law module registers its laws with @law."""

from __future__ import annotations

from ..target import Target

LAWS: dict[str, "Law"] = {}


class Law:
    def __init__(self, fn, *, backward=False, ops=False, cuda=False):
        self.fn = fn
        self.name = fn.__name__
        self.needs_backward = backward
        self.needs_ops = ops
        self.needs_cuda = cuda
        self.doc = (fn.__doc__ or "").strip().splitlines()[0]

    def applicable(self, target: Target) -> str | None:
        """None when the law applies; otherwise why not."""
        if self.needs_cuda and not target.is_cuda:
            return "needs a CUDA device (CPU lane)"
        if self.needs_ops and not target.has_ops:
            return "needs this project's torch.ops.rmsnorm operators"
        if self.needs_backward and not target.has_backward:
            return "target has no backward"
        return None


def law(**kw):
    def deco(fn):
        LAWS[fn.__name__] = Law(fn, **kw)
        return fn

    return deco

