"""python -m harness mutate: the mutation score of the suite.

Each mutant (harness/mutants.py) is built as a target and judged by the suite, in its own pytest
run that stops at the first failing law (``-x``); a mutant is killed when a law fails on it. The
table says which law killed it, the shrunk case it was saved as, and the time to kill. Beside it,
the baseline: the seed card's own check, one ``torch.testing.assert_close`` of the forward output
on one input, run against the same mutants.

Builds come first and are timed apart (``--jobs`` runs that many mutants at once afterwards).
Every verdict is appended to a JSON-lines file as soon as it is known, so an interrupted run
keeps what it measured.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

from . import mutants
from .build import ROOT

# The seed card's check: its reference and its one assert_close, on an input of the card's kind.
CARD_SHAPE = (32, 1024)
CARD_EPS = 1e-6
_BASELINE = r"""
import sys, torch
from harness.target import load
t = load("mutant:" + sys.argv[1], sys.argv[2])
g = torch.Generator().manual_seed(0)
x = torch.randn(%d, %d, generator=g).to(sys.argv[2])
weight = torch.randn(%d, generator=g).to(sys.argv[2])

def rmsnorm_ref(x, weight, eps=1e-6):
    inv_rms = torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps)
    return weight * x * inv_rms

out = t.module.forward(x, weight, %r)
out = out[0] if isinstance(out, (tuple, list)) else out
ref = rmsnorm_ref(x, weight, %r)
try:
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
except AssertionError as e:
    print(str(e).splitlines()[0]); sys.exit(1)
""" % (CARD_SHAPE[0], CARD_SHAPE[1], CARD_SHAPE[1], CARD_EPS, CARD_EPS)


@dataclass
class Result:
    mutant: str
    lane: str
    bug: str
    echoes: str
    status: str  # killed | survived | error
    law: str = ""
    message: str = ""
    case: str = ""
    corpus_file: str = ""
    seconds: float = 0.0
    build_seconds: float = 0.0
    baseline: str = ""  # killed | survived | error | not run
    baseline_detail: str = ""


def _failed_test(junit: Path) -> tuple[str, str]:
    """(law, first line of the failure) of the first failed test in a JUnit XML file."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return "", ""
    for tc in root.iter("testcase"):
        for tag in ("failure", "error"):
            el = tc.find(tag)
            if el is not None:
                name = tc.get("name", "")
                law = name[len("test_"):] if name.startswith("test_") else name
                text = (el.get("message") or el.text or "").strip()
                lines = [l for l in text.splitlines() if l.strip()]
                return law, (lines[0] if lines else "")[:300]
    return "", ""


def _shrunk_case(corpus_dir: Path) -> tuple[str, str]:
    from . import corpus

    entries = corpus.entries(directory=corpus_dir)
    if not entries:
        return "", ""
    best = sorted(entries, key=lambda e: (not e.shrunk, e.case.numel))[0]
    return best.case.short(), str(best.path)


def judge(m: mutants.Mutant, *, device: str, profile: str, out_dir: Path) -> Result:
    """Run the suite on one (built) mutant, stopping at its first failing law."""
    work = out_dir / m.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    junit = work / "junit.xml"
    env = dict(os.environ, RMSNORM_TALLY_DIR=tempfile.mkdtemp(prefix="rmsnorm-tally-"), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "properties"), "-x", "-q", "-p", "no:cacheprovider",
           f"--hypothesis-profile={profile}", f"--target=mutant:{m.name}", f"--device={device}",
           f"--corpus={work / 'corpus'}", f"--junitxml={junit}", f"--rootdir={ROOT}", "-c", str(ROOT / "pyproject.toml")]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    (work / "pytest.log").write_text(p.stdout + p.stderr)
    r = Result(m.name, m.lane, m.bug, m.echoes, "error", seconds=dt)
    if p.returncode == 0:
        r.status = "survived"
    elif p.returncode == 1:
        r.status = "killed"
        r.law, r.message = _failed_test(junit)
        r.case, r.corpus_file = _shrunk_case(work / "corpus")
    else:
        tail = [l for l in (p.stdout + p.stderr).splitlines() if l.strip()][-5:]
        r.message = f"pytest exit code {p.returncode}: " + " | ".join(tail)
    return r


def baseline(m: mutants.Mutant, *, device: str) -> tuple[str, str]:
    """The seed card's single check on the mutant: (killed | survived | error, detail)."""
    p = subprocess.run([sys.executable, "-c", _BASELINE, m.name, device], cwd=ROOT, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if p.returncode == 0:
        return "survived", ""
    lines = [l for l in (p.stdout + p.stderr).splitlines() if l.strip() and not l.startswith("W")]
    detail = (lines[-1] if lines else f"exit code {p.returncode}")[:200]
    # The check failed (exit 1: a mismatch or an exception) or the process died (a signal): either
    # way a user running the card's check would have seen it.
    return ("killed" if p.returncode == 1 or p.returncode < 0 else "error"), detail


def _table(results: list[Result]) -> list[str]:
    lines = ["| mutant | lane | bug | suite | killed by | shrunk case | seconds | card check |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        echo = f" ({r.echoes})" if r.echoes else ""
        suite = {"killed": "killed", "survived": "**survived**", "error": "error"}[r.status]
        lines.append(f"| {r.mutant} | {r.lane} | {r.bug}{echo} | {suite} | {r.law or '-'} | "
                     f"{('`' + r.case + '`') if r.case else '-'} | {r.seconds:.1f} | {r.baseline or 'not run'} |")
    return lines


def _score_line(results: list[Result], device: str, profile: str) -> str:
    """One line: the suite's score, the baseline's, and the time spent judging."""
    n = len(results)
    killed = sum(r.status == "killed" for r in results)
    base = sum(r.baseline == "killed" for r in results)
    ran = sum(r.baseline in ("killed", "survived") for r in results)
    wall = sum(r.seconds for r in results)
    out = f"mutation score, {device} lane, profile {profile}: suite {killed}/{n}"
    if ran:
        out += f"; the card's single assert_close: {base}/{ran}"
    return out + f"; {wall:.0f} s of judging (builds apart)"


def main(*, names: list[str] | None, device: str, profile: str, jobs: int, with_baseline: bool,
         report: Path | None, build_jobs: int = 1) -> int:
    from .target import default_device

    device = device or default_device()
    if device == "cpu":
        # Mutants of the CPU lane need no CUDA code; leaving it out makes every build faster.
        os.environ["RMSNORM_BUILD"] = "cpu"
    chosen = mutants.select(names, mutants.lanes_for(device))
    if not chosen:
        raise ValueError(f"no mutants to run on {device}: the chosen ones break the other device's code "
                         f"(this lane runs lanes {mutants.lanes_for(device)})")
    problems = mutants.check_catalogue()
    if problems:
        raise ValueError("the mutant catalogue does not match the sources:\n  " + "\n  ".join(problems))
    from . import toolchain

    print(f"mutate: {toolchain.probe().line()}", flush=True)  # its flags key every mutant's build
    out_dir = mutants.home() / f"runs-{device}"
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / "results.jsonl"
    log_path.write_text("")
    print(f"mutate: {len(chosen)} mutants on {device}, profile {profile}; each is judged as soon as it is built "
          f"({jobs} at a time)", flush=True)
    results: dict[str, Result] = {}
    builds: dict[str, float] = {}
    t_start = time.perf_counter()

    def one(m: mutants.Mutant) -> Result:
        r = judge(m, device=device, profile=profile, out_dir=out_dir)
        r.build_seconds = builds.get(m.name, 0.0)
        if with_baseline:
            r.baseline, r.baseline_detail = baseline(m, device=device)
        else:
            r.baseline = "not run"
        return r

    done = 0

    def report_one(r: Result) -> None:
        nonlocal done
        results[r.mutant] = r
        done += 1
        with open(log_path, "a") as fh:
            fh.write(json.dumps(asdict(r)) + "\n")
        what = f"KILLED by {r.law}" if r.status == "killed" else r.status.upper()
        print(f"  [{done}/{len(chosen)}] {r.mutant}: {what} in {r.seconds:.1f} s"
              f"{'; card check: ' + r.baseline if with_baseline else ''}"
              f"{('  ' + r.message[:160]) if r.status == 'error' else ''}", flush=True)

    # Builds run in `build_jobs` scratch trees at once while the mutants already built are judged.
    import queue
    import threading

    todo: "queue.Queue[mutants.Mutant]" = queue.Queue()
    for m in chosen:
        todo.put(m)
    built: "queue.Queue[tuple[mutants.Mutant, float | Exception]]" = queue.Queue()

    def builder(slot: int) -> None:
        while True:
            try:
                m = todo.get_nowait()
            except queue.Empty:
                return
            try:
                _, dt = mutants.build_mutant(m, log=lambda s: None, slot=slot)
                built.put((m, dt))
            except Exception as e:  # noqa: BLE001 - reported as that mutant's error
                built.put((m, e))

    threads = [threading.Thread(target=builder, args=(k,), daemon=True) for k in range(max(1, build_jobs))]
    for t in threads:
        t.start()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futs = []
        for _ in chosen:
            m, dt = built.get()
            if isinstance(dt, Exception):
                report_one(Result(m.name, m.lane, m.bug, m.echoes, "error", message=str(dt)[-300:]))
                continue
            builds[m.name] = dt
            print(f"  built {m.name} ({'cached' if dt == 0 else f'{dt:.1f} s'})", flush=True)
            futs.append(pool.submit(one, m))
            for f in [f for f in futs if f.done()]:
                futs.remove(f)
                report_one(f.result())
        for f in as_completed(futs):
            report_one(f.result())
    ordered = [results[m.name] for m in chosen]
    wall = time.perf_counter() - t_start
    lines = _table(ordered)
    score = (_score_line(ordered, device, profile) + f"; {wall:.0f} s wall with {jobs} job(s), of which "
             f"{sum(builds.values()):.0f} s building")
    print("\n" + "\n".join(lines) + "\n\n" + score, flush=True)
    survivors = [r.mutant for r in ordered if r.status != "killed"]
    if survivors:
        print(f"not killed: {', '.join(survivors)}", flush=True)
    text = "\n".join([f"# Mutation score ({device}, profile {profile})", "", score, ""] + lines) + "\n"
    target = report or (out_dir / "score.md")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    print(f"mutate: table written to {target}; verdicts in {log_path}", flush=True)
    return 0 if not survivors else 1
