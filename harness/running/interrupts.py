"""Ctrl-C for the runs that judge a target in this process (gate, fuzz): the signal only marks the
run as interrupted, and the run stops at the next safe point (between two cases, or within a
fifth of a second while it waits for the worker), raising KeyboardInterrupt there. Python's own
handler raises it wherever the main thread happens to be, and in a garbage-collector callback
(Hypothesis has one) such an exception is reported as "ignored" and lost: the run went on.

SIGTERM (what `timeout`, CI runners and job schedulers send) is taken the same way, so the run
still prints its report and verdict (the default action killed it with its output unflushed), and
is passed on to this process's children (the xdist workers) as SIGINT, which they stop on. The
exit code says which: 130 for SIGINT, 143 for SIGTERM."""

from __future__ import annotations

import os
import signal
import threading

_REQUESTED = threading.Event()
_RECEIVED = {"signal": None}  # the last signal taken over, whether or not a safe point has acted on it


def _children() -> list[int]:
    """This process's direct children (Linux /proc; elsewhere none)."""
    me, out = os.getpid(), []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1] == str(me):
            out.append(int(name))
    return out


def _on_signal(signum, frame) -> None:
    _RECEIVED["signal"] = signum
    _REQUESTED.set()
    if signum == signal.SIGTERM:  # Ctrl-C reaches the whole process group; SIGTERM only this process
        for pid in _children():
            try:
                os.kill(pid, signal.SIGINT)
            except OSError:
                pass


def _on_signal_at_once(signum, frame) -> None:
    _on_signal(signum, frame)
    _REQUESTED.clear()
    raise KeyboardInterrupt


def install(at_once: bool = False) -> dict:
    """Take Ctrl-C and SIGTERM over for this process (the main thread only); return the handlers replaced, for
    restore(). at_once: stop where the main thread is (KeyboardInterrupt), not at the next check(), for runs that
    have no safe points and run no Hypothesis (the bench, a deadline's SIGTERM mid-step)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    handler = _on_signal_at_once if at_once else _on_signal
    return {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}


def restore(previous: dict) -> None:
    """Put back the handlers install() replaced."""
    for s, handler in previous.items():
        signal.signal(s, handler)


def requested() -> bool:
    return _REQUESTED.is_set()


def acknowledge() -> None:
    """The run has stopped: a signal taken over must not stop the report that follows."""
    _REQUESTED.clear()


def received() -> bool:
    """Whether a signal was taken over in this run (check() and acknowledge() clear requested(),
    not this)."""
    return _RECEIVED["signal"] is not None


def signal_name() -> str:
    """What stopped the run: the signal's name, or "pytest stopped" when none came."""
    return signal.Signals(_RECEIVED["signal"]).name if _RECEIVED["signal"] else "pytest stopped"


def exit_code() -> int:
    """130 after SIGINT (or pytest's own interrupt), 143 after SIGTERM."""
    return 143 if _RECEIVED["signal"] == signal.SIGTERM else 130


def check() -> None:
    """At a safe point: stop the run if it was interrupted (KeyboardInterrupt, once)."""
    if _REQUESTED.is_set():
        _REQUESTED.clear()
        raise KeyboardInterrupt
