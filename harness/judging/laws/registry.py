"""The law registry: each law module registers its laws with @law."""

from __future__ import annotations

import os

from harness.judging.caps import past_caps
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


FORMS = ("card", "variant", "any")  # the call forms a law judges (harness.judging.variant)


class Law:
    def __init__(self, fn, *, backward=False, ops=False, cuda=False, optional=False, form="card", when=None,
                 cpu=False):
        if form not in FORMS:
            raise ValueError(f"law {fn.__name__}: expected form from {FORMS}, but got {form!r}")
        self.fn = fn
        self.name = fn.__name__
        self.needs_backward = backward
        self.needs_ops = ops
        self.needs_cuda = cuda
        self.needs_cpu = cpu  # the CPU lane's (a GPU lane has a law of its own for what it judges)
        self.optional = optional
        self.form = form  # card: the card's forward/backward; variant: a variant's call form; any: either
        self.when = when  # variant -> why the law does not apply to it, or None (a variant law's own condition)
        self.doc = (fn.__doc__ or "").strip().splitlines()[0]

    def applicable(self, target: Target, drawn: str | None = None) -> str | None:
        """None when the law applies; otherwise why not. drawn: the strategy its cases come from, where
        the law has several (forward_matches_reference_tall: the tall cases of forward_matches_reference)."""
        if self.optional and self.name not in required(getattr(target, "spec", None)):
            return f"not required of this target (--require {self.name.replace('_', '-')} holds it to it)"
        if getattr(target, "interpreted", False):  # Triton's interpreter: cases past its caps are not run
            why = past_caps(drawn or self.name)
            if why:
                return why
        if self.needs_cuda and not target.is_cuda:
            return "needs a CUDA device (CPU lane)"
        if self.needs_cpu and target.is_cuda:
            return "the CPU lane's (on a GPU, beyond_2_31_elements judges offsets past 2^31 with whole tensors)"
        if self.needs_ops and not target.has_ops:
            return "needs this project's torch.ops.rmsnorm operators"
        variant = getattr(target, "variant", None)
        if variant is not None and self.form == "card" and not variant.plain:
            return f"judges the card's call form; this target is a variant ({variant.describe()}): its variant laws do"
        if self.form == "variant" and (variant is None or variant.plain):
            return "judges a variant's call form (a fused add, (1 + w), no weight); this target has the card's"
        why = self.when(variant) if self.when is not None and variant is not None else None
        if why:
            return why
        if self.needs_backward and not target.has_backward:
            return "target has no backward"
        return None


def law(**kw):
    def deco(fn):
        LAWS[fn.__name__] = Law(fn, **kw)
        return fn

    return deco

