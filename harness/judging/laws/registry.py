"""The law registry: each law module registers its laws with @law."""

from __future__ import annotations

import os

from harness.judging.target import Target

LAWS: dict[str, "Law"] = {}

# Laws a target is held to only when they are required of it: bitwise reproducibility and
# bitwise batch invariance are properties some correct kernels do not have (atomics, paths
# chosen by the number of rows). This project's kernels promise both.
REQUIRE_ENV = "RMSNORM_REQUIRE"  # comma-separated, e.g. batch-invariant,deterministic; "" for none


def optional_laws() -> tuple[str, ...]:
    return tuple(name for name, law_ in LAWS.items() if law_.optional)


def parse_required(value: str) -> set[str]:
    """The laws named in a --require value (dashes or underscores); ValueError for others."""
    names = {v.strip().replace("-", "_") for v in value.split(",") if v.strip() and v.strip() != "none"}
    unknown = sorted(names - set(optional_laws()))
    if unknown:
        allowed = ", ".join(n.replace("_", "-") for n in optional_laws())
        raise ValueError(f"--require: expected names from {allowed} (or none), but got {', '.join(unknown)}")
    return names


def required(spec) -> set[str]:
    """The optional laws this target is held to: $RMSNORM_REQUIRE when set, else all of them for
    this project (and its mutants), none for other targets."""
    env = os.environ.get(REQUIRE_ENV)
    if env is not None:
        return parse_required(env)
    if spec is None or spec.project_code:  # spec: harness.running.spec.TargetSpec
        return set(optional_laws())
    return set()


class Law:
    def __init__(self, fn, *, backward=False, ops=False, cuda=False, optional=False):
        self.fn = fn
        self.name = fn.__name__
        self.needs_backward = backward
        self.needs_ops = ops
        self.needs_cuda = cuda
        self.optional = optional
        self.doc = (fn.__doc__ or "").strip().splitlines()[0]

    def applicable(self, target: Target) -> str | None:
        """None when the law applies; otherwise why not."""
        if self.optional and self.name not in required(getattr(target, "spec", None)):
            return f"not required of this target (--require {self.name.replace('_', '-')} holds it to it)"
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

