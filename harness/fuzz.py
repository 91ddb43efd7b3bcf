"""python -m harness fuzz --minutes M: a time-boxed fuzzing session over every law, with a
progress line, ending with a report. Failing cases are saved to the corpus as soon as they are
found (and replaced by their shrunk form), so an interrupted session keeps them."""

from __future__ import annotations

import sys
import threading
import time

from .build import ROOT

PROPERTIES = ROOT / "properties"
PYTEST_ARGS = ["-p", "no:cacheprovider", "-s", "-q", f"--rootdir={ROOT}", "-c", str(ROOT / "pyproject.toml")]


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


def _collect(laws):
    """(test name, node id) of the property tests, collected by pytest from properties/ (the
    harness runs the tests; it does not import them)."""
    import pytest

    found = _Outcomes()
    with _quiet():
        pytest.main([str(PROPERTIES), "--collect-only", *PYTEST_ARGS], plugins=[found])
    tests = [(nid.split("::")[-1][len("test_"):], nid) for nid in found.items]
    if not tests:
        raise RuntimeError(f"fuzz: pytest collected no tests from {PROPERTIES}")
    if laws is not None:
        missing = set(laws) - {name for name, _ in tests}
        if missing:
            raise ValueError(f"fuzz: unknown laws {sorted(missing)}; expected some of {sorted(n for n, _ in tests)}")
        tests = [(name, nid) for name, nid in tests if name in laws]
    return tests


class _quiet:
    """Keep pytest's own terminal output out of the session's progress line and report."""

    def __enter__(self):
        import io

        self._out, sys.stdout = sys.stdout, io.StringIO()

    def __exit__(self, *exc):
        sys.stdout = self._out


def _run_chunk(nodeid: str, profile: str):
    """Run one test for one chunk of examples; returns its report (None if it did not run)."""
    import pytest

    got = _Outcomes()
    with _quiet():
        code = pytest.main([str(ROOT / nodeid), f"--hypothesis-profile={profile}", *PYTEST_ARGS], plugins=[got])
    if code == pytest.ExitCode.INTERRUPTED:
        raise KeyboardInterrupt
    return got.reports[-1] if got.reports else None


def _law_of(test: str) -> str:
    """The law a test checks: test_forward_matches_reference_large checks forward_matches_reference."""
    for suffix in ("_large", "_tall"):
        if test.endswith(suffix):
            return test[: -len(suffix)]
    return test


def _progress(stop: threading.Event, t0: float, deadline: float, state: dict) -> None:
    from . import session

    tty = sys.stderr.isatty()
    last = 0.0
    while not stop.wait(1.0):
        now = time.time()
        if not tty and now - last < 30:
            continue
        last = now
        n = sum(sum(c.values()) for c in session.TALLY.by_law.values())
        rate = n / max(now - t0, 1e-9)
        line = (f"fuzz: {now - t0:6.0f} s of {deadline - t0:.0f} | {n} cases ({rate:.1f}/s) | "
                f"{len(state['failed'])} failing law(s) | now: {state['law']}")
        print(("\r" + line.ljust(110)) if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)


def fuzz(*, minutes: float, laws=None, chunk: int = 50) -> int:
    if minutes <= 0:
        raise ValueError(f"fuzz: expected --minutes > 0, but got {minutes}")
    if chunk < 1:
        raise ValueError(f"fuzz: expected --chunk >= 1, but got {chunk}")
    sys.path.insert(0, str(ROOT))
    from hypothesis import settings

    import conftest  # noqa: F401  (registers the profiles)

    settings.register_profile("fuzz-run", parent=settings.get_profile("fuzz"), max_examples=chunk)
    settings.load_profile("fuzz-run")  # before the tests are imported, so they take it
    from . import session

    import os

    from .pytest_plugin import FUZZ_DRIVER

    os.environ[FUZZ_DRIVER] = "1"  # each chunk is a pytest run; the session reports once, here
    tests = _collect(laws)
    from .target import is_prebuilt

    if not is_prebuilt(session.target_spec()):
        from . import toolchain

        print(f"fuzz: {toolchain.probe().line()}", file=sys.stderr)
    info = session.runner().info
    print(f"fuzz: lane {session.lane()}, target {session.target_spec()} ({info['note']}), "
          f"{len(tests)} tests of {len({_law_of(t) for t, _ in tests})} laws, {minutes:g} min", file=sys.stderr)
    t0 = time.time()
    deadline = t0 + minutes * 60
    state = {"law": "-", "failed": {}, "not_run": {}, "ran": set()}
    stop = threading.Event()
    th = threading.Thread(target=_progress, args=(stop, t0, deadline, state), daemon=True)
    th.start()
    interrupted = False
    try:
        rotation = list(tests)
        while rotation and time.time() < deadline:
            for law, nodeid in list(rotation):
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
    print(file=sys.stderr)
    elapsed = time.time() - t0
    total = sum(sum(c.values()) for c in session.TALLY.by_law.values())
    print(f"fuzz report: {total} cases in {elapsed:.0f} s ({total / max(elapsed, 1e-9):.1f}/s)"
          + (", interrupted" if interrupted else ""))
    from .pytest_plugin import summary_lines

    for line in summary_lines(session.TALLY, sorted(state["not_run"].items())):
        print(line)
    never = [t for t, _ in tests if t not in state["ran"]]
    if never:
        print(f"never ran (the session ended before their turn): {', '.join(never)}")
    for f in session.TALLY.failures:
        print(f"FAILED {f['law']} [{f['status']}]: saved {f['file']}")
    for law, msg in state["failed"].items():
        if not any(f["law"] == law for f in session.TALLY.failures):
            print(f"FAILED {law}: {msg}")
    if interrupted:
        return 130
    return 1 if state["failed"] else 0
