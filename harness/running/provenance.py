"""What a run names the code it judged by: the commit in a clone (``$COMMIT`` on a machine that got the
tree without git), else the installed package's version."""

from __future__ import annotations

import os
import subprocess
from importlib import metadata
from pathlib import Path

from rmsnorm._buildenv import ROOT


def commit(ignore: tuple[str, ...] = ()) -> str:
    """The commit a run is labelled with: $COMMIT when set, else git's HEAD, "+dirty" when tracked
    files other than those matching `ignore` (git pathspecs) have changed."""
    if os.environ.get("COMMIT"):  # set by .ci/gpu-lane on machines that get the tree without git
        return os.environ["COMMIT"]
    if not in_a_clone():
        return "unknown"
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", "--", "."]
                               + [f":!{p}" for p in ignore], capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except OSError:
        return "unknown"


def in_a_clone() -> bool:
    """Whether the harness runs from a clone of this project (its folder is a git checkout's top),
    not from an installed copy, which may sit inside some other repository (a Python installation's
    own checkout once lent the gate its commit)."""
    try:
        top = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True).stdout.strip()
    except OSError:
        return False
    return bool(top) and Path(top).resolve() == Path(ROOT).resolve()


def provenance() -> str:
    """What a verdict line names the harness by: the commit in a clone ($COMMIT when set), else the
    installed package's version."""
    c = commit()
    if c != "unknown":
        return f"commit {c}"
    try:
        return f"rmsnorm-gate {metadata.version('rmsnorm-gate')} (installed)"
    except metadata.PackageNotFoundError:
        return "commit unknown"
