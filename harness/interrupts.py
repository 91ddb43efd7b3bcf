"""Ctrl-C for the runs that judge a target in this process (gate, fuzz): the signal only marks the
run as interrupted, and the run stops at the next safe point (between two cases, or within a
fifth of a second while it waits for the worker), raising KeyboardInterrupt there. Python's own
handler raises it wherever the main thread happens to be, and in a garbage-collector callback
(Hypothesis has one) such an exception is reported as "ignored" and lost: the run went on."""

from __future__ import annotations

import signal
import threading

_REQUESTED = threading.Event()


def install() -> None:
    """Take Ctrl-C over for this process (the main thread only)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, lambda signum, frame: _REQUESTED.set())


def requested() -> bool:
    return _REQUESTED.is_set()


def check() -> None:
    """At a safe point: stop the run if it was interrupted (KeyboardInterrupt, once)."""
    if _REQUESTED.is_set():
        _REQUESTED.clear()
        raise KeyboardInterrupt
