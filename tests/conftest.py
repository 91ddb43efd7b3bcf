"""How the tests share the machine when pytest-xdist runs them side by side (`-n 2 --dist
loadfile`, as the README's test line does): every test holds a shared lock while it runs, and a
test marked ``exclusive`` holds it alone, so nothing runs beside it. Those are the tests whose
assertions are about time with little room (a gate's wall within 5 s of its budget, how fast a
worker restarts): another test's load beside them would make them measure that load. Each one
held alone keeps the other worker waiting, so a test whose timing follows its own run (a signal
sent a set time after the run's log shows where it is, two runs compared from one start, a bound
a minute wide) is not marked.

The lock is writer-first: an exclusive test takes a turnstile before it waits for the shared
holders to finish, and no new shared holder gets past the turnstile meanwhile. Without xdist no
lock is taken.
"""

from __future__ import annotations

import fcntl
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

# The tests start about a hundred Python processes (gates, fuzz sessions, builds, the mutation score),
# and each of them compiled this clone's modules, and pytest's assertion-rewritten law modules, again
# from source where bytecode is not written (PYTHONDONTWRITEBYTECODE, set on the 2-core CI machine):
# 1.1 s of CPU in a gate's own process, on two cores that the test line keeps busy. The suite's own
# processes write it (into __pycache__ folders, which .gitignore leaves out); a gate run outside the
# tests keeps the environment's choice.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    sys.dont_write_bytecode = False


def pytest_configure(config):
    config.addinivalue_line("markers", "exclusive(why): run with no other test beside it (its assertions are "
                                       "about time)")
    config.addinivalue_line("markers", "slow(why): takes over 60 s on the 2-core CI machine, and why it must "
                                       "(`-m 'not slow'` leaves these out of a quick run)")


def _lock_dir() -> Path | None:
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not uid:
        return None
    d = Path(__file__).resolve().parent.parent / ".build" / "test-locks" / uid
    d.mkdir(parents=True, exist_ok=True)
    return d


_HELD = [0]  # how deep this process is inside a held lock (a fixture set up within a test takes none)


@contextmanager
def _held(exclusive: bool):
    d = _lock_dir()
    if d is None or _HELD[0]:
        yield
        return
    with open(d / "turnstile", "a+") as turnstile, open(d / "tests", "a+") as tests:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(tests, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if not exclusive:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        _HELD[0] += 1
        try:
            yield
        finally:
            _HELD[0] -= 1
            fcntl.flock(tests, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """A module's or session's fixture (a gate run that several tests read) is work like a test's:
    it holds the shared lock while it is set up."""
    if fixturedef.scope == "function":
        yield
        return
    with _held(exclusive=False):
        yield


@pytest.fixture(autouse=True)
def _share_the_machine(request):
    with _held(exclusive=request.node.get_closest_marker("exclusive") is not None):
        yield
