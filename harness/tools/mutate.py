"""python -m harness mutate: the mutation score of the suite.

First the unmutated sources, built as the mutants are (``mutant:original``), are judged by the
same suite, profile and seed: if they fail, there is no score (exit 2, naming the law and the
case). Then each mutant (harness/mutants/catalogue.py) is built as a target and judged by the suite, in its
own pytest run that stops at the first failing law (``-x``). A mutant is killed when a law fails
on it with a case that the original passes: each killing case is replayed on the original, and
a kill the original shares is not counted. The table says which law killed it, the shrunk case,
whether the original passes that case, and the time to kill (the summary gives the median and the
slowest). Beside it, the seed card's own check, one ``torch.testing.assert_close`` of the forward
output on one input, run against the same mutants.

Kept cases: the case that killed each mutant last time is kept with the catalogue
(``harness/mutants/kills/DEVICE/NAME.json``) and replayed first, in a worker of its own, like the
committed regressions; only a mutant that its kept case no longer kills is judged by the whole
suite, and ``--keep`` then keeps its new case. ``--fresh`` ignores the kept cases (a full search
for every mutant), so that they never hide a weaker suite. The score line says how many kills
came from kept cases and how many from a fresh search. The original is judged while the mutants
are; without its pass there is no score.

Builds come first and are timed apart (``--jobs`` runs that many mutants at once afterwards).
Every verdict is appended to a JSON-lines file as soon as it is known, so an interrupted run
keeps what it measured. Mutants that only a sanitizer can see (a race whose bits come out right)
are left to the GPU lane's sanitize step and named.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.mutants import builder, catalogue as mutants
from rmsnorm._buildenv import ROOT
from harness.running.locations import command, properties_dir, pytest_args
from harness.running.session import ALONE_ENV
from harness.running.spec import TargetSpec
from harness.running.tally import Tally
from harness.running.worker import SHARERS_ENV
from harness.running import corpus
from harness.running.worker import THREADS_ENV, share_of_cores
from harness.judging import laws
from harness.running.worker import HarnessError, Runner
import tempfile
from harness.running.worker import context
from harness.running.loading import default_device
from rmsnorm import _toolchain as toolchain
import queue

KILLS = Path(mutants.__file__).resolve().parent / "kills"  # the kept killing cases: DEVICE/NAME.json

# The seed card's check: its reference and its one assert_close, on an input of the card's kind.
CARD_SHAPE = (32, 1024)
CARD_EPS = 1e-6
_BASELINE = r"""
import sys, torch
from harness.running.loading import load
from harness.running.spec import TargetSpec
t = load(TargetSpec("mutant", sys.argv[1]), sys.argv[2])
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
    confirmed: str = ""  # for a kill: "yes" (the original passes its case), else why not
    source: str = ""  # for a kill: "kept" (the kept case killed it) or "search" (the suite found it)


def counts(r: "Result") -> bool:
    """A kill that counts: a law failed on the mutant with a case the original passes."""
    return r.status == "killed" and r.confirmed == "yes"


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


def _shrunk_case(corpus_dir: Path):
    """The saved case that killed a mutant (the shrunk one, else the smallest), or None."""
    entries = corpus.entries(directory=corpus_dir)
    if not entries:
        return None
    return sorted(entries, key=lambda e: (not e.shrunk, e.case.numel))[0]


def judge(m: mutants.Mutant, *, device: str, profile: str, out_dir: Path, processes: int = 1) -> Result:
    """Run the suite on one (built) mutant, stopping at its first failing law. processes: how many
    judge side by side (each target worker then takes its share of torch's CPU threads)."""
    work = out_dir / m.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    junit = work / "junit.xml"
    tally = work / "tally"
    tally.mkdir()
    # The kill is the first failing case; mutate replays it on the original, and later runs replay it first.
    env = dict(os.environ, RMSNORM_TALLY_DIR=str(tally), PYTHONUNBUFFERED="1", **{ALONE_ENV: "0"})
    if processes > 1:
        env[SHARERS_ENV] = str(processes)
    cmd = [sys.executable, "-m", "pytest", str(properties_dir()), "-x", "-q", *pytest_args(),
           f"--hypothesis-profile={profile}", f"--rmsnorm-target=mutant:{m.name}", f"--rmsnorm-device={device}",
           f"--rmsnorm-corpus={work / 'corpus'}", f"--junitxml={junit}"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    (work / "pytest.log").write_text(p.stdout + p.stderr)
    r = Result(m.name, m.lane, m.bug, m.echoes, "error", seconds=dt)
    if p.returncode == 0:
        r.status = "survived"
        short = sorted(Tally.read(tally).no_room)
        if short:  # a survivor the suite did not wholly judge: said beside it, never hidden
            r.message = f"not run on this GPU, too little free memory: {', '.join(short)}"
    elif p.returncode == 1:
        r.status = "killed"
        r.law, r.message = _failed_test(junit)
        entry = _shrunk_case(work / "corpus")
        if entry is not None:
            r.case, r.corpus_file = entry.case.short(), str(entry.path)
    else:
        tail = [l for l in (p.stdout + p.stderr).splitlines() if l.strip()][-5:]
        r.message = f"pytest exit code {p.returncode}: " + " | ".join(tail)
    return r


def _worker_env(processes: int) -> dict:
    """torch's CPU threads for a worker mutate starts itself, where `processes` judge side by side:
    its share of the cores. Each would otherwise start a thread per core (9 processes on 16 cores,
    144 threads, beside 8 compilers in the GPU lane)."""
    threads = share_of_cores(processes)
    return {THREADS_ENV: str(threads)} if threads else {}


def kept_path(m: mutants.Mutant, device: str, kills_dir: Path | None = None) -> Path:
    return (kills_dir or KILLS) / device / f"{m.name}.json"


def replay_kept(m: mutants.Mutant, *, device: str, kills_dir: Path | None = None, processes: int = 1) -> Result | None:
    """The mutant on its kept case, in a worker of its own: a Result when that case kills it (a law
    fails, or the worker crashes or hangs), None when there is no kept case or it no longer kills."""
    path = kept_path(m, device, kills_dir)
    if not path.is_file():
        return None
    entry = corpus.load_entry(path)
    if entry.law not in laws.LAWS:
        print(f"  {m.name}: its kept case names no law of the suite ({entry.law!r}): searching afresh", flush=True)
        return None
    t0 = time.perf_counter()
    runner = Runner(TargetSpec("mutant", m.name), device, env=_worker_env(processes))
    try:
        runner.start()
        v = runner.check(entry.law, entry.case)
    except HarnessError as e:  # the harness, not the mutant, failed on the case: the suite decides
        print(f"  {m.name}: its kept case could not be replayed ({str(e).splitlines()[0][:200]}): searching afresh",
              flush=True)
        return None
    finally:
        runner.stop()
    if v.status not in ("fail", "crash", "hang"):
        return None
    first = v.message.strip().splitlines()[0][:300] if v.message.strip() else v.status
    return Result(m.name, m.lane, m.bug, m.echoes, "killed", law=entry.law, message=first, case=entry.case.short(),
                  corpus_file=str(path), seconds=time.perf_counter() - t0, source="kept")


def keep(r: Result, device: str, kills_dir: Path | None = None) -> Path | None:
    """Keep the case of a confirmed kill from a fresh search as the mutant's kept case (its replay
    line names where it is kept, not the run's scratch folder)."""
    if not counts(r) or r.source != "search" or not r.corpus_file:
        return None
    dest = (kills_dir or KILLS) / device / f"{r.mutant}.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    doc = json.loads(Path(r.corpus_file).read_text())
    shown = dest.relative_to(ROOT) if dest.is_relative_to(KILLS) else dest  # the committed ones: from the root
    if isinstance(doc, dict) and "replay" in doc:
        doc["replay"] = f"{command()} replay {shown}"
    dest.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return dest


def _card_check(name: str, device: str, log: str) -> None:
    """The card's check on the mutant, in a process of its own: its output goes to log."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.argv = ["-c", name, device]
    exec(compile(_BASELINE, "<the card's check>", "exec"), {"__name__": "__main__"})


def baseline(m: mutants.Mutant, *, device: str) -> tuple[str, str]:
    """The seed card's single check on the mutant: (killed | survived | error, detail). It runs in a
    process of its own forked from the workers' server, which has imported torch: a fresh
    interpreter for each mutant imported torch again (2-3 s a mutant, 18 on the CPU lane)."""
    with tempfile.TemporaryDirectory(prefix="rmsnorm-card-") as d:
        log = Path(d) / "card.log"
        proc = context().Process(target=_card_check, args=(m.name, device, str(log)), daemon=True)
        proc.start()
        proc.join()
        code = proc.exitcode
        output = log.read_text(errors="replace") if log.is_file() else ""
    if code == 0:
        return "survived", ""
    lines = [l for l in output.splitlines() if l.strip() and not l.startswith("W")]
    detail = (lines[-1] if lines else f"exit code {code}")[:200]
    # The check failed (exit 1: a mismatch or an exception) or the process died (a signal): either
    # way a user running the card's check would have seen it.
    return ("killed" if code == 1 or code < 0 else "error"), detail


def _table(results: list[Result]) -> list[str]:
    lines = ["| mutant | lane | bug | suite | killed by | shrunk case | the original on that case | seconds | card check |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        echo = f" ({r.echoes})" if r.echoes else ""
        suite = {"killed": "killed" if counts(r) else "**not counted**", "survived": "**survived**",
                 "error": "error"}[r.status] + (f" ({r.message})" if r.status == "survived" and r.message else "")
        original = (r.confirmed if r.confirmed != "yes" else "passes") if r.status == "killed" else "-"
        lines.append(f"| {r.mutant} | {r.lane} | {r.bug}{echo} | {suite} | {r.law or '-'} | "
                     f"{('`' + r.case + '`') if r.case else '-'} | {original} | {r.seconds:.1f} | "
                     f"{r.baseline or 'not run'} |")
    return lines


def kill_times(results: list[Result]) -> str:
    """The median and the slowest time to kill, over the kills that count."""
    times = sorted((r.seconds, r.mutant) for r in results if counts(r))
    if not times:
        return "no kill"
    kept = sum(counts(r) and r.source == "kept" for r in results)
    return (f"time to kill: median {statistics.median(t for t, _ in times):.0f} s, slowest {times[-1][0]:.0f} s "
            f"({times[-1][1]}); kills: {kept} from kept cases, {len(times) - kept} from a fresh search")


def _score_line(results: list[Result], device: str, profile: str) -> str:
    """One line: the suite's score (kills confirmed on the original), the baseline's, the times."""
    n = len(results)
    killed = sum(counts(r) for r in results)
    base = sum(r.baseline == "killed" for r in results)
    ran = sum(r.baseline in ("killed", "survived") for r in results)
    wall = sum(r.seconds for r in results)
    out = (f"mutation score, {device} lane, profile {profile}: suite {killed}/{n} (each kill confirmed: the "
           f"original passes the killing case); {kill_times(results)}")
    if ran:
        out += f"; the card's single assert_close: {base}/{ran}"
    return out + f"; {wall:.0f} s of judging (builds apart)"


class Original:
    """The unmutated sources in a worker process of their own, to replay killing cases on."""

    def __init__(self, device: str, processes: int = 1) -> None:
        self.device, self.processes = device, processes
        self._runners: dict[str, Runner] = {}
        self._lock = threading.Lock()

    def confirm(self, r: Result) -> str:
        """"yes" when the original passes the case that killed r, else what it did. The original is judged
        as the mutant was: through the mutant's form where it names one (catalogue.original_for)."""
        if not r.corpus_file:
            return "no case saved to replay"

        entry = corpus.load_entry(Path(r.corpus_file))
        original = mutants.original_for(mutants.BY_NAME[r.mutant]).name
        with self._lock:
            runner = self._runners.get(original)
            if runner is None:
                runner = self._runners[original] = Runner(TargetSpec("mutant", original), self.device,
                                                          env=_worker_env(self.processes))
                runner.start()
            v = runner.check(entry.law, entry.case)
        if v.status == "pass":
            return "yes"
        return f"fails it too ({v.status}: {v.message.splitlines()[0][:120] if v.message else ''})"

    def stop(self) -> None:
        for runner in self._runners.values():
            runner.stop()


def _baseline_failure(r: Result) -> str:
    """What the unmutated sources failed, in the words of a set-up error."""
    if r.status == "killed":
        return (f"the unmutated sources fail the suite: {r.law or 'a law'} on `{r.case or '?'}`: {r.message} "
                f"(saved: {r.corpus_file or 'nothing'}); a mutant cannot be judged by a suite its original fails")
    return f"the unmutated sources could not be judged: {r.message}"


def build_order(chosen: list[mutants.Mutant], device: str, *, fresh: bool = False,
                kills_dir: Path | None = None) -> list[mutants.Mutant]:
    """The order mutants are built and judged in: those without a kept case first (a search takes
    minutes, a kept case seconds: the longest jobs start first), else the catalogue's order."""
    return sorted(chosen, key=lambda m: not fresh and kept_path(m, device, kills_dir).exists())


def main(*, names: list[str] | None, device: str, profile: str, jobs: int, with_baseline: bool,
         report: Path | None, build_jobs: int = 1, fresh: bool = False, keep_new: bool = False,
         kills_dir: Path | None = None) -> int:
    device = device or default_device()
    before = os.environ.get("RMSNORM_BUILD")
    if device == "cpu":
        # Mutants of the CPU lane need no CUDA code; leaving it out makes every build faster.
        os.environ["RMSNORM_BUILD"] = "cpu"
    try:
        return _main(names=names, device=device, profile=profile, jobs=jobs, with_baseline=with_baseline,
                     report=report, build_jobs=build_jobs, fresh=fresh, keep_new=keep_new, kills_dir=kills_dir)
    finally:  # called in-process (the tests), it leaves the environment as it found it
        if before is None:
            os.environ.pop("RMSNORM_BUILD", None)
        else:
            os.environ["RMSNORM_BUILD"] = before


def _chosen(names: list[str] | None, device: str) -> tuple[list, list, list]:
    """The mutants the suite judges on device, those left to compute-sanitizer, and those no tool judges;
    ValueError where nothing is left for the suite."""
    chosen = mutants.select(names, mutants.lanes_for(device))
    if not chosen:
        raise ValueError(f"no mutants to run on {device}: the chosen ones break the other device's code "
                         f"(this lane runs lanes {mutants.lanes_for(device)})")
    not_judged = [m for m in chosen if m.unjudged]
    by_sanitizer = [m for m in chosen if not m.by_suite and not m.unjudged]
    by_suite = [m for m in chosen if m.by_suite]
    if not by_suite:
        why = ([f"{', '.join(m.name for m in by_sanitizer)} are judged by compute-sanitizer ({command()} sanitize "
                "--target mutant:NAME)"] if by_sanitizer else []) + \
              [f"{m.name} is judged by no tool ({m.unjudged})" for m in not_judged]
        raise ValueError("no mutants for the suite among those chosen: " + "; ".join(why))
    problems = mutants.check_catalogue()
    if problems:
        raise ValueError("the mutant catalogue does not match the sources:\n  " + "\n  ".join(problems))
    return by_suite, by_sanitizer, not_judged


class _Builds:
    """Mutants built in `slots` scratch trees, side by side, in build order: built() hands each over as it is
    ready (with its seconds, or the exception its build raised)."""

    def __init__(self, order: list, device: str, slots: int) -> None:
        self.device = device
        self._todo: "queue.Queue" = queue.Queue()
        for m in order:
            self._todo.put(m)
        self._built: "queue.Queue" = queue.Queue()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._work, args=(k,), daemon=True) for k in range(max(1, slots))]
        for t in self._threads:
            t.start()

    def _work(self, slot: int) -> None:
        while not self._stop.is_set():
            try:
                m = self._todo.get_nowait()
            except queue.Empty:
                return
            try:
                _, dt = builder.build_mutant(m, device=self.device, log=lambda s: None, slot=slot)
                self._built.put((m, dt))
            except Exception as e:  # noqa: BLE001 - reported as that mutant's error
                self._built.put((m, e))

    def built(self):
        return self._built.get()

    def stop(self) -> None:
        self._stop.set()


class _Run:
    """One score: the original judged beside the mutants, each mutant's kept case first, each kill confirmed
    on the original, a line per mutant as it ends, and the table."""

    def __init__(self, *, device: str, profile: str, jobs: int, with_baseline: bool, fresh: bool, keep_new: bool,
                 kills_dir: Path | None, out_dir: Path, count: int) -> None:
        self.device, self.profile, self.jobs, self.with_baseline = device, profile, jobs, with_baseline
        self.fresh, self.keep_new, self.kills_dir, self.out_dir, self.count = fresh, keep_new, kills_dir, out_dir, count
        self.processes = max(1, jobs) + 1  # the jobs, and the original judged beside them: they share the cores
        self.log_path = out_dir / "results.jsonl"
        self.log_path.write_text("")
        self.results: dict[str, Result] = {}
        self.builds: dict[str, float] = {}
        self.original = Original(device, self.processes)

    def judged(self, m) -> Result:
        """The mutant's verdict: its kept case (confirmed on the original), else a search by the suite."""
        try:
            r = None if self.fresh else replay_kept(m, device=self.device, kills_dir=self.kills_dir,
                                                    processes=self.processes)
            if r is not None:
                r.confirmed = self.original.confirm(r)
                if r.confirmed != "yes":  # the original fails the kept case too: it kills nothing; search
                    r = None
            if r is None:
                r = judge(m, device=self.device, profile=self.profile, out_dir=self.out_dir, processes=self.processes)
                if r.status == "killed":
                    r.source = "search"
                    r.confirmed = self.original.confirm(r)
            r.build_seconds = self.builds.get(m.name, 0.0)
            if self.keep_new:
                kept = keep(r, self.device, self.kills_dir)
                if kept is not None:
                    print(f"  kept the case that killed {m.name}: {kept}", flush=True)
            if self.with_baseline and not m.form:  # the card's check calls the card's form, not a fused one
                r.baseline, r.baseline_detail = baseline(m, device=self.device)
            else:
                r.baseline = "not run"
            return r
        except Exception as e:  # noqa: BLE001 - that mutant's error, not the whole run's
            return Result(m.name, m.lane, m.bug, m.echoes, "error", message=f"{type(e).__name__}: {e}"[-300:])

    def report_one(self, r: Result) -> None:
        self.results[r.mutant] = r
        with open(self.log_path, "a") as fh:
            fh.write(json.dumps(asdict(r)) + "\n")
        if counts(r):
            what = f"KILLED by {r.law} ({'its kept case' if r.source == 'kept' else 'a fresh search'})"
        elif r.status == "killed":
            what = f"NOT COUNTED: {r.law} failed, but the original {r.confirmed}"
        else:
            what = r.status.upper()
        print(f"  [{len(self.results)}/{self.count}] {r.mutant}: {what} in {r.seconds:.1f} s"
              f"{'; card check: ' + r.baseline if self.with_baseline else ''}"
              f"{('  ' + r.message[:160]) if r.status in ('error', 'survived') and r.message else ''}", flush=True)

    def judge_all(self, chosen: list, builds: _Builds) -> Result:
        """Every mutant judged as its build is ready, `jobs` at a time, the original beside them; the
        original's verdict."""
        base_box: list[Result] = []
        base_thread = threading.Thread(
            target=lambda: base_box.append(judge(mutants.ORIGINAL, device=self.device, profile=self.profile,
                                                 out_dir=self.out_dir, processes=self.processes)),
            daemon=True)
        base_thread.start()
        try:
            with ThreadPoolExecutor(max_workers=max(1, self.jobs)) as pool:
                futs = []
                for _ in chosen:
                    m, dt = builds.built()
                    if isinstance(dt, Exception):
                        self.report_one(Result(m.name, m.lane, m.bug, m.echoes, "error", message=str(dt)[-300:]))
                        continue
                    self.builds[m.name] = dt
                    print(f"  built {m.name} ({'cached' if dt == 0 else f'{dt:.1f} s'})", flush=True)
                    futs.append(pool.submit(self.judged, m))
                    for f in [f for f in futs if f.done()]:
                        futs.remove(f)
                        self.report_one(f.result())
                for f in as_completed(futs):
                    self.report_one(f.result())
            base_thread.join()
        finally:
            builds.stop()
            self.original.stop()
        return base_box[0] if base_box else Result("original", "both", "", "", "error", message="not judged")


def _main(*, names: list[str] | None, device: str, profile: str, jobs: int, with_baseline: bool,
          report: Path | None, build_jobs: int, fresh: bool, keep_new: bool, kills_dir: Path | None) -> int:
    chosen, by_sanitizer, not_judged = _chosen(names, device)
    print(f"mutate: {toolchain.probe().line()}", flush=True)  # its flags key every mutant's build
    out_dir = builder.home() / f"runs-{device}"
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    # The original first: built as the mutants are, judged by the same suite, profile and seed while
    # the mutants are (no score without its pass).
    _, dt_original = builder.build_mutant(mutants.ORIGINAL, device=device, log=lambda s: None)
    kept_note = "kept cases ignored (--fresh): every mutant searched by the suite" if fresh else \
        f"each mutant's kept case first ({KILLS.name}/{device}/), the suite where it no longer kills"
    print(f"mutate: judging the unmutated sources (built in {dt_original:.1f} s), profile {profile}, beside "
          f"{len(chosen)} mutants on {device} ({jobs} at a time; {kept_note}; each kill replayed on the original)",
          flush=True)
    if by_sanitizer:
        print(f"mutate: left to compute-sanitizer (the GPU lane's sanitize step), races the outputs need not show: "
              f"{', '.join(f'{m.name} ({m.sanitizer})' for m in by_sanitizer)}", flush=True)
    for m in not_judged:
        print(f"mutate: not judged by any tool: {m.name} ({m.bug}): {m.unjudged}", flush=True)
    run = _Run(device=device, profile=profile, jobs=jobs, with_baseline=with_baseline, fresh=fresh,
               keep_new=keep_new, kills_dir=kills_dir, out_dir=out_dir, count=len(chosen))
    # Builds run in `build_jobs` scratch trees while the original, then the mutants built, are judged.
    base = run.judge_all(chosen, _Builds(build_order(chosen, device, fresh=fresh, kills_dir=kills_dir), device,
                                         build_jobs))
    if base.status != "survived":
        print(f"{command()} mutate: set-up error: {_baseline_failure(base)}", file=sys.stderr, flush=True)
        return 2
    print(f"mutate: the unmutated sources pass ({base.seconds:.0f} s)", flush=True)
    return _write_score([run.results[m.name] for m in chosen], run, not_judged, report,
                        wall=time.perf_counter() - t_start, building=sum(run.builds.values()) + dt_original,
                        original_s=base.seconds)


def _write_score(ordered: list[Result], run: _Run, not_judged: list, report: Path | None, *, wall: float,
                 building: float, original_s: float) -> int:
    """The table and the score line, printed and written; 0 where every mutant was killed."""
    lines = _table(ordered)
    score = (_score_line(ordered, run.device, run.profile) + f"; {wall:.0f} s wall with {run.jobs} job(s), of which "
             f"{building:.0f} s building; the original passed in {original_s:.0f} s")
    print("\n" + "\n".join(lines) + "\n\n" + score, flush=True)
    survivors = [r.mutant for r in ordered if not counts(r)]
    if survivors:
        print(f"not killed: {', '.join(survivors)}", flush=True)
    blind = [f"Not judged by any tool: {m.name} ({m.bug}): {m.unjudged}." for m in not_judged]
    text = "\n".join([f"# Mutation score ({run.device}, profile {run.profile})", "", score, ""] + lines
                     + ([""] + blind if blind else [])) + "\n"
    target = report or (run.out_dir / "score.md")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    print(f"mutate: table written to {target}; verdicts in {run.log_path}", flush=True)
    return 0 if not survivors else 1
