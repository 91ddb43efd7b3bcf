"""``mutate``: the mutation score over the catalogue (harness.tools.mutate)."""

from __future__ import annotations

from pathlib import Path

from harness.tools.mutate import main


def subcommand(args) -> int:
    names = [n for n in args.only.split(",") if n] if args.only else None
    return main(names=names, device=args.device, profile=args.profile, jobs=args.jobs, build_jobs=args.build_jobs,
                       with_baseline=not args.no_baseline, report=Path(args.report).resolve() if args.report else None,
                       fresh=args.fresh, keep_new=args.keep,
                       kills_dir=Path(args.kills_dir).resolve() if args.kills_dir else None)
