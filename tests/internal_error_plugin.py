"""A pytest plugin for tests/test_verdict.py: an error of pytest's own (INTERNALERROR) once three tests have
run, as xdist's controller once raised on a worker that a SIGTERM stopped mid-test."""

import pytest

_FINISHED: list[str] = []


@pytest.hookimpl
def pytest_runtest_logfinish(nodeid, location):
    _FINISHED.append(nodeid)
    if len(_FINISHED) == 3:
        raise RuntimeError("internal_error_plugin: an error of pytest's own")
