"""python -m harness fuzz --minutes M: a time-boxed fuzzing session over every law, with a
progress line, ending with a report. Failing cases are saved to the corpus as soon as they are
found (and replaced by their shrunk form), so an interrupted session keeps them.

With --workers K (default: several a GPU as the cores allow, at most 4; one per 4 cores on the CPU)
the session is a campaign of K processes, spread over the GPUs (CUDA_VISIBLE_DEVICES, round robin),
each starting its rotation of the laws at
another place; they share the case corpus and Hypothesis' example database (both directories,
written file by file), and this process shows one progress line and prints one report that adds
up theirs. Ctrl-C stops every worker; each reports what it did, and the report says so."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

from harness.commands.exits import SetupError
from harness.commands.gate import preflight, setup_failed
from harness.commands.options import apply_target_env
from harness.judging.laws import LAWS
from harness.pytest_plugin import FUZZ_DRIVER
from harness.running import interrupts, session
from harness.running.corpus import corpus_dir
from harness.running.gpus import default_processes
from harness.running.loading import default_device
from harness.running.locations import properties_dir, pytest_args, work_root
from harness.running.provenance import provenance
from harness.running.report import summary_lines
from harness.running.tally import Tally, unfinished_failures
from harness.running.worker import SHARERS_ENV, start_cpu_fork_server
from rmsnorm._buildenv import ROOT
import io

DB_ENV = "RMSNORM_HYPOTHESIS_DB"  # Hypothesis' example database for fuzzing: a folder or redis://...


def example_database(spec: str):
    """Hypothesis' example database at spec: a folder (one file per example, so several hosts can
    share it over a network file system) or redis://host:port/db (hypothesis.extra.redis)."""
    if spec.startswith("redis://"):
        try:  # an optional dependency: imported only for a Redis database
            import redis
            from hypothesis.extra.redis import RedisExampleDatabase
        except ImportError as e:
            raise ValueError(f"--database {spec}: a Redis database needs the redis package (pip install redis): "
                             f"{e}") from None
        return RedisExampleDatabase(redis.Redis.from_url(spec))
    return DirectoryBasedExampleDatabase(str(Path(spec).resolve()))


def _pytest_args() -> list[str]:
    return ["-s", "-q", *pytest_args()]


class _Outcomes:
    """A pytest plugin that keeps what each run of a test came to."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.reports: list = []

    def pytest_collection_modifyitems(self, items):
        self.items = [item.nodeid for item in items]

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.skipped:
            self.reports.append(report)


def _collect(laws, profile: str | None = None):
    """(test name, node id) of the property tests, collected by pytest from properties/ (the
    harness runs the tests; it does not import them). profile: the Hypothesis profile the tests
    are imported under; @given takes its settings (budget, database) from the profile loaded when
    the test is defined, and the later chunks import nothing again."""
    found = _Outcomes()
    with _quiet():
        pytest.main([str(properties_dir()), "--collect-only", *_pytest_args(),
                     *([f"--hypothesis-profile={profile}"] if profile else [])], plugins=[found])
    tests = [(nid.split("::")[-1][len("test_"):], nid) for nid in found.items]
    if not tests:
        raise RuntimeError(f"fuzz: pytest collected no tests from {properties_dir()}")
    if laws is not None:
        missing = set(laws) - {name for name, _ in tests}
        if missing:
            raise ValueError(f"fuzz: unknown laws {sorted(missing)}; expected some of {sorted(n for n, _ in tests)}")
        tests = [(name, nid) for name, nid in tests if name in laws]
    return tests


class _quiet:
    """Keep pytest's own terminal output out of the session's progress line and report."""

    def __enter__(self):
        self._out, sys.stdout = sys.stdout, io.StringIO()

    def __exit__(self, *exc):
        sys.stdout = self._out


def _run_chunk(nodeid: str, profile: str):
    """Run one test for one chunk of examples; returns its report (None if it did not run)."""
    got = _Outcomes()
    with _quiet():
        code = pytest.main([str(properties_dir().parent / nodeid), f"--hypothesis-profile={profile}", *_pytest_args()],
                           plugins=[got])
    if code == pytest.ExitCode.INTERRUPTED:
        raise KeyboardInterrupt
    return got.reports[-1] if got.reports else None


def _not_applicable(law: str, info: dict) -> str | None:
    """Why law does not apply to the loaded target (harness.judging.laws' rules), or None."""
    t = SimpleNamespace(is_cuda=info["device"].startswith("cuda"), has_ops=info["has_ops"],
                        has_backward=info["has_backward"], spec=session.current().spec)
    return LAWS[law].applicable(t) if law in LAWS else None


def _law_of(test: str) -> str:
    """The law a test checks: test_forward_matches_reference_large checks forward_matches_reference."""
    for suffix in ("_large", "_tall"):
        if test.endswith(suffix):
            return test[: -len(suffix)]
    return test


PROGRESS_ENV = "RMSNORM_PROGRESS_S"


def progress_interval() -> float:
    """Seconds between progress lines when they go to a file, not a terminal (default 30)."""
    v = os.environ.get(PROGRESS_ENV, "30")
    try:
        return max(1.0, float(v))
    except ValueError:
        raise ValueError(f"{PROGRESS_ENV}: expected seconds, but got {v!r}") from None


def _progress(stop: threading.Event, t0: float, deadline: float, state: dict) -> None:
    tty = sys.stderr.isatty()
    every = progress_interval()
    last = 0.0
    while not stop.wait(1.0):
        now = time.time()
        if not tty and now - last < every:
            continue
        last = now
        n = sum(sum(c.values()) for c in session.current().tally.by_law.values())
        rate = n / max(now - t0, 1e-9)
        failing = set(state["failed"]) | set(session.current().tally.unfinished)  # found failing, shrinking or shrunk
        line = (f"fuzz: {now - t0:6.0f} s of {deadline - t0:.0f} | {n} cases ({rate:.1f}/s) | "
                f"{len(failing)} failing law(s) | now: {state['law']}")
        print(("\r" + line.ljust(110)) if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)


def _status_writer(stop: threading.Event, path: Path, state: dict) -> None:
    """A worker's progress, for the campaign's line: cases so far, failing laws, the law running."""
    while not stop.wait(1.0):
        n = sum(sum(c.values()) for c in session.current().tally.by_law.values())
        failing = set(state["failed"]) | set(session.current().tally.unfinished)  # found failing, shrinking or shrunk
        _write_json(path, {"cases": n, "failed": sorted(failing), "law": state["law"], "done": False})


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, default=list))
    os.replace(tmp, path)  # atomic: the reader never sees half a file


def fuzz(*, minutes: float, laws=None, chunk: int = 50, status: Path | None = None, offset: int = 0) -> int:
    """One session. status: run as one worker of a campaign (no progress line, no report: the
    tally and the session's state go to this file for the campaign to add up); offset: where in
    the rotation of the laws this worker starts."""
    if minutes <= 0:
        raise ValueError(f"fuzz: expected --minutes > 0, but got {minutes}")
    if chunk < 1:
        raise ValueError(f"fuzz: expected --chunk >= 1, but got {chunk}")

    from harness.running import hypothesis_profiles as profiles  # noqa: F401  (registers the profiles)

    db = os.environ.get(DB_ENV)
    settings.register_profile("fuzz-run", parent=settings.get_profile("fuzz"), max_examples=chunk,
                              **({"database": example_database(db)} if db else {}))
    settings.load_profile("fuzz-run")  # before the tests are imported, so they take it

    os.environ[FUZZ_DRIVER] = "1"  # each chunk is a pytest run; the session reports once, here
    t_setup = time.time()
    try:
        tests = _collect(laws, "fuzz-run")
        info = session.current().runner().info
    except KeyboardInterrupt:
        if status is not None:
            _write_json(status, {"done": True, "interrupted": True, "elapsed": time.time() - t_setup,
                                 "tally": session.current().tally.to_json(), "failed": {}, "not_run": {}, "ran": []})
            return interrupts.exit_code()
        return interrupted_in_set_up(time.time() - t_setup)
    state = {"law": "-", "failed": {}, "not_run": {}, "ran": set()}
    # Tests whose law does not apply here (CUDA-only on the CPU, this project's operators, optional
    # laws not required) are reported as not run, not counted as the session's tests.
    for name, nodeid in list(tests):
        why = _not_applicable(_law_of(name), info)
        if why:
            state["not_run"][name] = why
            tests.remove((name, nodeid))
    if status is None:
        print(f"fuzz: lane {session.lane_label()}, target {session.current().spec} ({info['note']}), "
              f"{len(tests)} tests of {len({_law_of(t) for t, _ in tests})} laws "
              f"({len(state['not_run'])} more not run here), {minutes:g} min", file=sys.stderr)
    t0 = time.time()
    deadline = t0 + minutes * 60
    stop = threading.Event()
    if status is None:
        th = threading.Thread(target=_progress, args=(stop, t0, deadline, state), daemon=True)
    else:
        th = threading.Thread(target=_status_writer, args=(stop, status, state), daemon=True)
    th.start()
    interrupted = False
    try:
        k = offset % len(tests)
        rotation = list(tests[k:] + tests[:k])
        while rotation and time.time() < deadline:
            for law, nodeid in list(rotation):
                interrupts.check()
                if time.time() >= deadline:
                    break
                state["law"] = law
                state["ran"].add(law)
                rep = _run_chunk(nodeid, "fuzz-run")
                if rep is None or rep.skipped:
                    why = rep.longrepr[2] if rep is not None and isinstance(rep.longrepr, tuple) else "did not run"
                    state["not_run"][law] = str(why).replace("Skipped: ", "")
                    rotation.remove((law, nodeid))
                elif rep.failed:
                    text = str(rep.longrepr).strip()
                    state["failed"][law] = text.splitlines()[0][:300] if text else "failed"
                    rotation.remove((law, nodeid))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        stop.set()
        th.join()
    interrupted = interrupted or interrupts.requested()
    elapsed = time.time() - t0
    if status is not None:
        runner = session.current()._runner
        if runner is not None:
            session.current().tally.worker = Counter(restarts=runner.restarts, kept=runner.kept_after_crash)
        _write_json(status, {"done": True, "interrupted": interrupted, "elapsed": elapsed,
                             "tally": session.current().tally.to_json(), "failed": state["failed"],
                             "not_run": state["not_run"], "ran": sorted(state["ran"])})
        return 1 if state["failed"] else (interrupts.exit_code() if interrupted else 0)
    print(file=sys.stderr)
    return _report(session.current().tally, state, tests, elapsed, interrupted)


def interrupted_in_set_up(elapsed: float) -> int:
    """The report of a session interrupted before it checked a case (exit 130)."""
    print(f"fuzz report: 0 cases in {elapsed:.0f} s, interrupted during set-up (before any case was drawn)")
    print(verdict_line("INTERRUPTED", 0, elapsed))
    return interrupts.exit_code()


def verdict_line(verdict: str, cases: int, elapsed: float) -> str:
    return (f"rmsnorm fuzz {verdict}: lane {session.lane_label()}, target {session.current().spec}, {provenance()}, "
            f"{cases} cases in {elapsed:.0f} s")


def _report(tally, state: dict, tests, elapsed: float, interrupted: bool, per_worker: list[int] | None = None) -> int:
    total = sum(sum(c.values()) for c in tally.by_law.values())
    workers = (f", {len(per_worker)} workers ({' + '.join(map(str, per_worker))} cases)"
               if per_worker is not None else "")
    print(f"fuzz report: {total} cases in {elapsed:.0f} s ({total / max(elapsed, 1e-9):.1f}/s){workers}"
          + (", interrupted" if interrupted else ""))

    for line in summary_lines(tally, sorted(state["not_run"].items())):
        print(line)
    never = [t for t, _ in tests if t not in state["ran"]]
    if never:
        print(f"never ran (the session ended before their turn): {', '.join(never)}")
    seen = set()
    for f in tally.failures:  # workers of a campaign may save the same shrunk case (a file named by content)
        if (f["law"], f["file"]) not in seen:
            seen.add((f["law"], f["file"]))
            print(f"FAILED {f['law']} [{f['status']}]: saved {f['file']}")
    for law, msg in state["failed"].items():
        if not any(f["law"] == law for f in tally.failures) and law not in tally.unfinished:
            print(f"FAILED {law}: {msg}")
    # (summary_lines named the laws stopped while shrinking, with their first failing cases.)

    failed = set(state["failed"]) | {f["law"] for f in unfinished_failures(tally)}
    # A law that failed fails the session, interrupted or not; interrupted only with nothing failed.
    code = 1 if failed else (interrupts.exit_code() if interrupted else 0)
    print(verdict_line({1: "FAILED", 0: "PASSED"}.get(code, f"INTERRUPTED ({interrupts.signal_name()})"), total,
                       elapsed))
    return code


def default_workers(device: str) -> int:
    """Several processes a GPU as the cores allow, on the CPU one per four cores (gpus.default_processes)."""
    return default_processes(device)


def campaign(*, workers: int, minutes: float, laws=None, chunk: int = 50, device: str = "cpu") -> int:
    """K fuzzing processes, one GPU each, one progress line and one report."""
    if workers < 1:
        raise ValueError(f"fuzz: expected --workers >= 1, but got {workers}")
    if minutes <= 0:
        raise ValueError(f"fuzz: expected --minutes > 0, but got {minutes}")
    tests = _collect(laws)
    gpus = 0
    if device == "cuda":
        gpus = torch.cuda.device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [v for v in visible.split(",") if v.strip()] if visible else [str(i) for i in range(gpus)]


    corpus = corpus_dir()
    where = f"GPUs {', '.join(ids[i % len(ids)] for i in range(workers))}" if ids else "the CPU"
    print(f"fuzz: a campaign of {workers} workers on {where}, target {session.current().spec}, {len(tests)} tests of "
          f"{len({_law_of(t) for t, _ in tests})} laws, {minutes:g} min; one corpus ({corpus}) and one Hypothesis "
          f"database ({os.environ.get(DB_ENV) or '.hypothesis/examples'}) shared", file=sys.stderr)

    (work_root() / "fuzz").mkdir(parents=True, exist_ok=True)
    status_dir = Path(tempfile.mkdtemp(prefix="campaign-", dir=work_root() / "fuzz"))  # removed at the end
    procs = []
    t0 = time.time()
    for i in range(workers):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env[SHARERS_ENV] = str(workers)  # they share the cores
        if ids:
            env["CUDA_VISIBLE_DEVICES"] = ids[i % len(ids)]
        cmd = [sys.executable, "-m", "harness", "fuzz", "--minutes", str(minutes), "--chunk", str(chunk),
               "--workers", "1", "--worker-status", str(status_dir / f"worker-{i}.json"), "--worker-offset",
               str(i * len(tests) // workers)]
        if laws:
            cmd += ["--laws", ",".join(laws)]
        log = open(status_dir / f"worker-{i}.log", "w")
        procs.append((subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    interrupted = False
    tty = sys.stderr.isatty()
    last = 0.0
    try:
        while any(p.poll() is None for p, _ in procs):
            time.sleep(0.2)
            interrupts.check()
            now = time.time()
            if now - last < (1.0 if tty else progress_interval()):
                continue
            last = now
            st = [_read_json(status_dir / f"worker-{i}.json") for i in range(workers)]
            n = sum(s.get("cases", 0) if not s.get("done") else sum(sum(c.values()) for c in
                    s["tally"]["by_law"].values()) for s in st)
            failed = set().union(*[set(s.get("failed", [])) for s in st])
            line = (f"fuzz: {now - t0:6.0f} s of {minutes * 60:.0f} | {n} cases ({n / max(now - t0, 1e-9):.1f}/s) "
                    f"on {workers} workers | {len(failed)} failing law(s)")
            print(("\r" + line.ljust(110)) if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        interrupted = True
        for p, _ in procs:  # a terminal's Ctrl-C reached them too; a signal to this process alone did not
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p, _ in procs:
            try:
                p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
    finally:
        for _, log in procs:
            log.close()
    print(file=sys.stderr)

    tally = Tally()
    state = {"failed": {}, "not_run": {}, "ran": set()}
    per_worker = []
    for i, (p, _) in enumerate(procs):
        s = _read_json(status_dir / f"worker-{i}.json")
        if not s.get("done"):
            tail = (status_dir / f"worker-{i}.log").read_text().strip().splitlines()[-5:]
            print(f"fuzz: worker {i} ended (exit {p.returncode}) without its report; its last lines:\n  "
                  + "\n  ".join(tail), file=sys.stderr)
            state["failed"][f"worker {i}"] = f"the worker died (exit {p.returncode})"
            per_worker.append(0)
            continue
        tally.merge(s["tally"])
        per_worker.append(sum(sum(c.values()) for c in s["tally"]["by_law"].values()))
        state["failed"].update(s["failed"])
        state["not_run"].update(s["not_run"])
        state["ran"].update(s["ran"])
        interrupted = interrupted or s.get("interrupted", False)
    shutil.rmtree(status_dir, ignore_errors=True)
    return _report(tally, state, tests, time.time() - t0, interrupted, per_worker)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def subcommand(args) -> int:
    interrupts.install()
    apply_target_env(args)
    if args.database:
        example_database(args.database)  # a ValueError names what is missing (exit 2)
        db = args.database
        os.environ[DB_ENV] = db if db.startswith("redis://") else str(Path(db).resolve())
    laws = args.laws.split(",") if args.laws else None
    start_cpu_fork_server()
    if args.worker_status:  # one worker of a campaign: its parent did the set-up checks
        return fuzz(minutes=args.minutes, laws=laws, chunk=args.chunk, status=Path(args.worker_status),
                    offset=args.worker_offset)
    t0 = time.perf_counter()
    try:
        preflight("fuzzing")
    except SetupError as e:
        return setup_failed("fuzz", e)
    except KeyboardInterrupt:
        return interrupted_in_set_up(time.perf_counter() - t0)

    workers = args.workers if args.workers is not None else default_workers(default_device())
    if workers == 1:
        return fuzz(minutes=args.minutes, laws=laws, chunk=args.chunk)
    return campaign(workers=workers, minutes=args.minutes, laws=laws, chunk=args.chunk, device=default_device())
