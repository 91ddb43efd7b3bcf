"""Options shared by the subcommands that judge a target (gate, fuzz): which target, on which device,
its corpus and its contract; and comma-separated lists."""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.running.spec import ENV as spec_env, TargetSpec
from harness.judging.laws.registry import REQUIRE_ENV, parse_required
from harness.judging.contract import ENV, from_args


def apply_target_env(args) -> None:
    if args.target:
        os.environ[spec_env] = str(TargetSpec.parse(args.target))
    if args.device:
        os.environ["RMSNORM_DEVICE"] = args.device
    if args.corpus:
        os.environ["RMSNORM_CORPUS"] = str(Path(args.corpus).resolve())
    if args.lenient:
        os.environ["RMSNORM_STRICT"] = "0"
    if getattr(args, "require", None) is not None:

        parse_required(args.require)  # a ValueError names what was wrong (exit 2)
        os.environ[REQUIRE_ENV] = args.require

    variant = {"residual": args.residual, "residual_dtype": args.residual_dtype, "sum": args.sum,
               "weight_offset": args.weight_offset, "weight": False if args.no_weight else None, "order": args.order}
    declared = from_args(args.dtypes, args.weight_dtypes, args.layouts, args.max_n, args.no_zero_rows,
                         args.n_multiple_of, args.max_row_bytes, args.weight_layouts, args.exclude, variant)
    if declared is not None:
        os.environ[ENV] = json.dumps(declared)
        os.environ[ENV + "_FROM"] = "cli"


def csv_list(value: str, what: str, allowed=None, conv=str) -> list:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise ValueError(f"{what}: expected a comma-separated list, but got {value!r}")
    out = []
    for v in items:
        try:
            v = conv(v)
        except ValueError:
            raise ValueError(f"{what}: expected {conv.__name__} values, but got {v!r}") from None
        if allowed is not None and v not in allowed:
            raise ValueError(f"{what}: expected values from {', '.join(map(str, allowed))}, but got {v!r}")
        out.append(v)
    return out
