"""``build``: build (or find cached) a target's extension, the toolchain probed first."""

from __future__ import annotations

import time

from harness.running.loading import default_device
from harness.running.spec import TargetSpec
from harness.mutants import builder
from harness.mutants.catalogue import BY_NAME
from rmsnorm import _build as build
from rmsnorm import _toolchain


def subcommand(args) -> int:
    spec = TargetSpec.parse(args.target)
    if spec.prebuilt:
        print(f"rmsnorm: {spec} is prebuilt; nothing to build")
        return 0
    print(f"rmsnorm: {_toolchain.probe().line()}", flush=True)
    if spec.kind == "mutant":
        path, dt = builder.build_mutant(BY_NAME[spec.name], device=args.device or default_device())
        print(f"rmsnorm: {spec} ready in {dt:.1f} s: {path}")
        return 0
    bspec, note = spec.build_spec()
    t0 = time.perf_counter()
    module = build.build(bspec, verbose=args.verbose)
    print(f"rmsnorm: {module.__name__} ready ({note}) in {time.perf_counter() - t0:.1f} s")
    return 0


def toolchain(args) -> int:
    """``toolchain``: probe the C++ toolchain afresh and say what was found."""
    return _toolchain.main()
