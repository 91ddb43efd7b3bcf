"""``profile``: Nsight Compute on one shape, summarised (harness.tools.nsight)."""

from __future__ import annotations

from harness.tools import nsight


def subcommand(args) -> int:
    return nsight.main(args)
