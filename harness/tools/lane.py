"""The GPU lanes' records: which code each judged and what it said (``benchmarks/gpu-lane.md`` for the
kernel lane, ``benchmarks/judge-lane.md`` for the judge lane).

The trees of ``kernels/``, ``binding/`` and ``sources.txt`` are identified the way git does
(``git rev-parse HEAD:kernels``), computed from the files themselves, so the lane can record them
on a machine that received the working tree without its git directory. A CPU-lane test
(``tests/test_lane.py``) fails when the current trees differ from those of a passing record: no
CUDA code is shipped that the GPU lane has not passed.

    python3 -m harness.tools.lane trees                 # the trees of this checkout
    python3 -m harness.tools.lane record --lane kernel|judge --log-dir D --wall S --commit C [--limit 480] [--out F]

A lane that ran past its limit (--limit, seconds of wall) did not pass, whatever its steps said.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import time
from pathlib import Path

from rmsnorm._buildenv import ROOT

# What the lane vouches for: the CUDA and binding sources and the list the builds read.
GUARDED = ("kernels", "binding", "sources.txt")
RECORD = ROOT / "benchmarks" / "gpu-lane.md"
# What the judge lane judged besides: the harness and the laws (the panel and the card judge them).
JUDGED = ("harness", "properties") + GUARDED
JUDGE_RECORD = ROOT / "benchmarks" / "judge-lane.md"


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _tree_id(folder: Path) -> str:
    """git's id of the tree of folder's files (regular files and subfolders; git's entry order)."""
    entries = []
    for p in folder.iterdir():
        if p.name in ("__pycache__", ".git") or p.is_symlink():
            continue
        if p.is_dir():
            entries.append((p.name + "/", b"40000", p.name, bytes.fromhex(_tree_id(p))))
        elif p.is_file():
            mode = b"100755" if os.access(p, os.X_OK) else b"100644"
            entries.append((p.name, mode, p.name, bytes.fromhex(_blob_id(p.read_bytes()))))
    body = b"".join(mode + b" " + name.encode() + b"\0" + sha for _, mode, name, sha in sorted(entries))
    return hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()


def tree_ids(root: Path = ROOT, names: tuple[str, ...] = GUARDED) -> dict[str, str]:
    """{path: git object id} of the guarded paths of the checkout at root, from its files."""
    out = {}
    for name in names:
        p = root / name
        out[name] = _tree_id(p) if p.is_dir() else _blob_id(p.read_bytes())
    return out


def parse(text: str) -> dict:
    """The fields of a record: verdict, commit, and the id of each guarded path."""
    fields = {}
    for key, value in re.findall(r"^\| ([^|]+?) \| ([^|]+?) \|$", text, re.M):
        fields[key.strip("` ")] = value.strip("` ")
    return fields


def mismatches(record_text: str, current: dict[str, str]) -> list[str]:
    """Why the current trees are not the ones a passing lane judged (empty when they are)."""
    fields = parse(record_text)
    if fields.get("verdict") != "PASSED":
        return [f"the recorded GPU lane did not pass (verdict {fields.get('verdict', 'missing')!r})"]
    out = []
    for name, tree in current.items():
        if fields.get(name) != tree:
            out.append(f"{name} is {tree[:12]} here, but the GPU lane passed {fields.get(name, 'nothing')[:12]} "
                       f"(commit {fields.get('commit', '?')})")
    return out


def write(out: Path, *, verdict: str, commit: str, wall_s: float, machine: str, steps: list[tuple[str, str, float, str]],
          parts: int = 1, root: Path = ROOT, lane: str = "kernel", limit_s: float | None = None) -> str:
    if lane == "judge":
        trees = tree_ids(root, JUDGED)
        head = ["# The judge lane", "",
                "Written by `STEPS=judge .ci/gpu-lane` at the end of a run: the panel, the seed card's kernel and the",
                "property sheet on a GPU, judging the harness and the laws of the trees below. Not a landing condition",
                "(the CPU lane runs the CPU panel on every commit); a change to the judging runs it before its issue",
                "is resolved."]
    else:
        trees = tree_ids(root)
        head = ["# The GPU lane", "",
                "Written by `.ci/gpu-lane` at the end of a run. `tests/test_lane.py` (CPU lane, CI) fails when the "
                "trees", "of `kernels/`, `binding/` or `sources.txt` differ from these, or the verdict is not PASSED."]
    lines = head + ["",
             "| field | value |", "|---|---|",
             f"| verdict | {verdict} |", f"| commit | {commit} |",
             f"| when | {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} |",
             f"| machine | {machine} |",
             f"| wall | {wall_s:.0f} s{f' (limit {limit_s:.0f} s)' if limit_s else ''} |", f"| parts | {parts} |"]
    lines += [f"| {name} | {tree} |" for name, tree in trees.items()]
    lines += ["", "## Steps", ""]  # a list, not a table: the details hold pipes (scores, cases)
    lines += [f"- {name}: {step_verdict} in {secs:.0f} s" + (f"; {detail}" if detail else "")
              for name, step_verdict, secs, detail in steps]
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return text


def _read_steps(log_dir: Path, order: list[str]) -> list[tuple[str, str, float, str]]:
    steps = []
    for name in order:
        rc_file = log_dir / "steps" / f"{name}.rc"
        if not rc_file.exists():
            continue
        rc, secs = rc_file.read_text().split()
        detail_file = log_dir / "steps" / f"{name}.detail"
        detail = " ".join(detail_file.read_text().split()) if detail_file.exists() else ""
        steps.append((name, "PASSED" if rc == "0" else f"FAILED (exit {rc})", float(secs), detail[:400]))
    return steps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m harness.tools.lane")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("trees", help="the git ids of kernels/, binding/ and sources.txt here")
    r = sub.add_parser("record", help="write the lane's record from its step files")
    r.add_argument("--lane", choices=("kernel", "judge"), default="kernel")
    r.add_argument("--limit", type=float, default=None, help="seconds of wall the lane may take to pass")
    r.add_argument("--log-dir", required=True)
    r.add_argument("--steps", required=True, help="the steps run, in order, space-separated")
    r.add_argument("--wall", type=float, required=True)
    r.add_argument("--parts", type=int, default=1, help="runs the lane took (resumed at the same trees)")
    r.add_argument("--commit", required=True)
    r.add_argument("--machine", default="")
    r.add_argument("--out", default=None, help="the record (default benchmarks/gpu-lane.md or judge-lane.md)")
    args = p.parse_args(argv)
    if args.cmd == "trees":
        for name, tree in tree_ids().items():
            print(f"{name} {tree}")
        return 0
    steps = _read_steps(Path(args.log_dir), args.steps.split())
    over = args.limit is not None and args.wall > args.limit
    if over:
        steps.append(("limit", "FAILED (exit 1)", args.wall, f"the lane took {args.wall:.0f} s, past its "
                                                              f"{args.limit:.0f} s"))
    verdict = "PASSED" if steps and all(v == "PASSED" for _, v, _, _ in steps) else "FAILED"
    out = Path(args.out) if args.out else (JUDGE_RECORD if args.lane == "judge" else RECORD)
    print(write(out, verdict=verdict, commit=args.commit, wall_s=args.wall, machine=args.machine,
                steps=steps, parts=args.parts, lane=args.lane, limit_s=args.limit), end="")
    return 0 if verdict == "PASSED" else 1


if __name__ == "__main__":
    sys.exit(main())
