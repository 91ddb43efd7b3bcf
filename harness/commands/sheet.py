"""``sheet``: the property sheet, one gate run a target (harness.tools.sheet)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from harness.commands.exits import EXIT_SETUP
from harness.commands.options import csv_list
from harness.running.loading import default_device
from harness.running.locations import command
from harness.running.provenance import commit
from harness.tools.sheet import main


def subcommand(args) -> int:
    device = args.device or default_device()
    if device == "cuda":
        if not torch.cuda.is_available():
            print(f"{command()} sheet: set-up error: device cuda was asked for, but torch {torch.__version__} "
                  "sees no GPU here", file=sys.stderr)
            return EXIT_SETUP
    default = "project,peer:hf,peer:native" + (",peer:liger" if device == "cuda" else "")
    targets = csv_list(args.target or default, "--target")
    if args.side_by_side is not None and args.side_by_side < 1:
        raise ValueError(f"--side-by-side: expected at least 1 gate at a time, but got {args.side_by_side}")
    return main(targets, device, gate_profile=args.gate_profile, budget=args.budget, out_dir=Path(args.out),
                      commit=commit(), side_by_side=args.side_by_side)
