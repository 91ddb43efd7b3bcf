"""``sanitize``: compute-sanitizer's tools on one case a launch path (harness.tools.sanitize)."""

from __future__ import annotations

from harness.running.spec import TargetSpec
from harness.tools.sanitize import inner, main, parse_paths


def subcommand(args) -> int:
    spec = TargetSpec.parse(args.target)
    paths = parse_paths(args.paths)
    if paths and args.cases is not None:
        raise ValueError("sanitize: --cases (the first K path cases) and --paths (chosen ones) exclude each other")
    if args.inner:
        return inner(spec, args.cases, paths)
    return main(spec, args.tools.split(","), args.cases, paths)
