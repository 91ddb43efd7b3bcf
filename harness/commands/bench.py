"""``bench``: speed through the users' path beside the peers (harness.tools.bench), on a GPU."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from harness.commands.exits import EXIT_SETUP
from harness.commands.options import csv_list
from harness.running import interrupts
from harness.running.locations import command
from harness.running.provenance import commit
from harness.tools.bench import DEFAULT_NS, DTYPES, PEERS, load_json, plot, run, save
from harness.tools.bench_impls import implementations


def subcommand(args) -> int:
    if args.plot:
        results, ceiling, meta = load_json(Path(args.plot))
        print(plot(results, ceiling, Path(args.plot).with_suffix(".png")))
        return 0

    if not torch.cuda.is_available():
        print(f"{command()} bench: set-up error: the benchmark needs a CUDA GPU, and torch {torch.__version__} "
              "sees none here", file=sys.stderr)
        return EXIT_SETUP
    dtypes = csv_list(args.dtypes, "--dtypes", tuple(DTYPES))
    ns = csv_list(args.n, "--n", conv=int) if args.n else list(DEFAULT_NS)
    if any(n < 1 for n in ns):
        raise ValueError(f"--n: expected positive row lengths, but got {args.n!r}")
    peers = csv_list(args.peers, "--peers", PEERS) if args.peers else []
    targets = csv_list(args.target, "--target") if args.target else ["project"]
    impls, skipped = implementations(targets, peers)
    for line in skipped:
        print(f"bench: not run: {line}", file=sys.stderr)
    directions = tuple(csv_list(args.directions, "--directions", ("forward", "backward")))
    # SIGTERM (a deadline's `timeout`) stops the run as Ctrl-C does, at once: the steps that finished are saved.
    previous = interrupts.install(at_once=True)
    try:
        results, ceiling, stopped = run(impls, dtypes, ns, args.elements, decode=not args.no_decode,
                                              directions=directions)
    finally:
        interrupts.restore(previous)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "commit": commit(),
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "elements": args.elements,
            "not_run": skipped, "stopped": stopped}
    md_path, plot_line = save(results, ceiling, meta, Path(args.out))
    print(md_path.read_text())
    print(f"bench: {md_path}, {md_path.with_suffix('.json')}; {plot_line}")
    if stopped:
        print(f"bench: {stopped} ({interrupts.signal_name()})", file=sys.stderr)
        return interrupts.exit_code()
    return 0
