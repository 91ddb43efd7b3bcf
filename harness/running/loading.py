"""Loading a target inside the worker process: built (cached) or imported, wrapped as the laws see it
(harness.judging.target.Target), on the device the run asked for."""

from __future__ import annotations

import importlib
import os
import sys

import torch

import rmsnorm
from harness.judging.contract import of_target
from harness.judging.target import Target, differentiable_forward
from harness.running.spec import TargetSpec
from rmsnorm import _build as build


def allow_retained_graphs() -> None:
    """gradcheck differentiates a target's autograd many times over one graph (retain_graph=True). A
    torch.compile'd backward refuses that where AOTAutograd donated the saved tensors' memory to it ("compiled
    with non-empty donated buffers which requires ... retain_graph=False"): a correct compiled Gemma RMSNorm
    failed variant_gradcheck so on an H100. The donation only reuses memory, so it is switched off in the
    process that judges, before anything compiles; no value the target computes changes."""
    try:
        import torch._functorch.config as functorch_config
    except ImportError:
        return
    if hasattr(functorch_config, "donated_buffer"):
        functorch_config.donated_buffer = False


def load(spec: TargetSpec, device: str, strict: bool | None = None) -> Target:
    """Build (cached) and import the target inside this process."""
    spec = TargetSpec.parse(spec)  # a spec, or what a script or test wrote for one
    allow_retained_graphs()
    dev = torch.device(device)
    if spec.kind == "project":
        module = rmsnorm.extension()
        note = rmsnorm.build_note()
        has_ops = True
    elif spec.kind == "module":
        # The current folder importable, as under `python -m`: the console command does not add it,
        # and a module target beside the user once needed PYTHONPATH=.
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(spec.name)
        note = spec.note()
        has_ops = False
    elif spec.kind == "mutant":
        # The mutation tools build it: imported only for a mutant target.
        from harness.mutants import builder
        from harness.mutants.catalogue import BY_NAME

        module = builder.load(spec.name, dev.type)
        note = spec.note()
        rmsnorm.adopt(module, note)
        has_ops = True
        form = BY_NAME[spec.name].form
        if form:
            # A mutant of the fused forms is judged through a module calling rmsnorm.rms_norm, which now serves
            # the mutant's build (the card's form never calls that code).
            module = importlib.import_module(form)
            note = f"{note}, through {form}"
    elif spec.kind == "peer":
        from harness.running import peers  # the panel imports its libraries: only for a peer target

        module = peers.load(spec.name, device)
        note = spec.note()
        has_ops = False
    else:
        bspec, note = spec.build_spec()
        module = build.build(bspec)
        has_ops = False
    if not callable(getattr(module, "forward", None)):
        raise TypeError(f"target {spec}: module {module.__name__} has no callable forward(x, weight, eps)")
    if strict is None:
        strict = spec.project_code  # mutants are held to the project's contract
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device cuda was asked for, but torch sees no GPU here")
    t = Target(module=module, spec=spec, device=dev, strict=strict, has_ops=has_ops, note=note)
    t.variant = of_target(module, spec).variant  # the call form its laws judge (harness.judging.variant)
    if spec.kind in ("module", "sources") and t.variant.plain and differentiable_forward(module, dev):
        t.grads_by_autograd = True
        t.note = f"{note}; no backward: its gradients judged through autograd of its forward"
    return t


def default_device() -> str:
    env = os.environ.get("RMSNORM_DEVICE")
    if env:
        if env not in ("cpu", "cuda"):
            raise ValueError(f"RMSNORM_DEVICE: expected 'cpu' or 'cuda', but got {env!r}")
        return env
    return "cuda" if torch.cuda.is_available() else "cpu"
