"""The per-process state a test run shares: the worker for the target, the tallies of what was
checked and rejected, and the saving of failing cases.

Tests call ``check(law, case)``; which target and device they judge comes from the
environment (RMSNORM_TARGET, RMSNORM_DEVICE, RMSNORM_STRICT), which the pytest options and the
command line set. Tests need no fixtures, so they run under pytest, pytest-xdist, HypoFuzz and
``python -m harness fuzz`` alike.
"""

from __future__ import annotations

import atexit
import json
import os
import time
from collections import Counter, defaultdict
from pathlib import Path

from . import corpus
from .cases import Case
from .target import default_device, identity_of, parse_spec
from .worker import HarnessError, Runner, Verdict, lane_of

_RUNNER: Runner | None = None
_IDENTITY: dict | None = None
_SAVED_PROVISIONAL: dict[str, Path] = {}


class Tally:
    """What each law checked, what the target rejected (by case category), what failed."""

    def __init__(self) -> None:
        self.by_law: dict[str, Counter] = defaultdict(Counter)
        self.rejected_by_cat: dict[str, Counter] = defaultdict(Counter)
        self.seen_by_cat: dict[str, Counter] = defaultdict(Counter)
        self.reject_examples: dict[str, str] = {}
        self.seconds: Counter = Counter()
        self.unverified_rows = 0
        self.failures: list[dict] = []
        self.worker = Counter()  # restarts (after crashes and hangs), kept (carried on after a CUDA error)

    def add(self, law: str, case: Case, v: Verdict) -> None:
        self.by_law[law][v.status] += 1
        self.seconds[law] += v.seconds
        self.unverified_rows += int(v.facts.get("unverified_rows", 0)) if v.facts else 0
        for k, val in case.categories().items():
            self.seen_by_cat[k][val] += 1
            if v.status == "rejected":
                self.rejected_by_cat[k][val] += 1
        if v.status == "rejected":
            self.reject_examples.setdefault(v.message.split(":")[0], v.message)

    def to_json(self) -> dict:
        return {
            "by_law": {k: dict(c) for k, c in self.by_law.items()},
            "rejected_by_cat": {k: dict(c) for k, c in self.rejected_by_cat.items()},
            "seen_by_cat": {k: dict(c) for k, c in self.seen_by_cat.items()},
            "reject_examples": self.reject_examples,
            "seconds": dict(self.seconds),
            "unverified_rows": self.unverified_rows,
            "failures": self.failures,
            "worker": dict(self.worker),
        }

    def merge(self, d: dict) -> None:
        for k, c in d.get("by_law", {}).items():
            self.by_law[k].update(c)
        for k, c in d.get("rejected_by_cat", {}).items():
            self.rejected_by_cat[k].update(c)
        for k, c in d.get("seen_by_cat", {}).items():
            self.seen_by_cat[k].update(c)
        self.reject_examples.update(d.get("reject_examples", {}))
        self.seconds.update(d.get("seconds", {}))
        self.unverified_rows += d.get("unverified_rows", 0)
        self.failures += d.get("failures", [])
        self.worker.update(d.get("worker", {}))


TALLY = Tally()


def target_spec() -> str:
    return parse_spec(os.environ.get("RMSNORM_TARGET"))


def device() -> str:
    return default_device()


def strict() -> bool | None:
    v = os.environ.get("RMSNORM_STRICT")
    if v is None or v == "":
        return None
    if v not in ("0", "1"):
        raise ValueError(f"RMSNORM_STRICT: expected 0 or 1, but got {v!r}")
    return v == "1"


def runner() -> Runner:
    global _RUNNER
    if _RUNNER is None:
        env = {}
        dev = device()
        wid = os.environ.get("PYTEST_XDIST_WORKER", "")
        if dev == "cuda" and wid.startswith("gw") and "CUDA_VISIBLE_DEVICES" not in os.environ:
            import torch

            count = torch.cuda.device_count()
            if count > 1:  # one GPU per xdist worker
                env["CUDA_VISIBLE_DEVICES"] = str(int(wid[2:]) % count)
        _RUNNER = Runner(target_spec(), dev, strict=strict(), env=env)
        _RUNNER.start()
        atexit.register(_RUNNER.stop)
    return _RUNNER


def identity() -> dict:
    global _IDENTITY
    if _IDENTITY is None:
        _IDENTITY = identity_of(target_spec())
    return _IDENTITY


def _is_final() -> bool:
    try:
        from hypothesis.control import current_build_context

        return bool(current_build_context().is_final)
    except Exception:  # noqa: BLE001 - outside Hypothesis: a single call is final
        return True


def check(law: str, case: Case) -> Verdict:
    """Run law on case in the worker; raise AssertionError on failure, crash or hang, after
    saving the case to the corpus (provisionally at once, for good once Hypothesis has shrunk it)."""
    r = runner()
    _require(law, r.info)
    v = r.check(law, case)
    TALLY.add(law, case, v)
    if v.status in ("pass", "rejected"):
        return v
    if v.status == "not_applicable":
        raise HarnessError(f"law {law} drew a case it does not apply to ({v.message}): fix its strategy")
    message = f"[{v.status}] {v.message}"
    final = _is_final()
    try:
        if final:
            path = corpus.save(law, case, error=message, target=identity(), device=r.device, shrunk=True)
            prev = _SAVED_PROVISIONAL.pop(law, None)
            if prev is not None and prev != path:
                prev.unlink(missing_ok=True)
            TALLY.failures.append({"law": law, "status": v.status, "file": str(path), "message": v.message})
            message += f"\n  saved: {path}\n  replay: python -m harness replay {path}"
        elif law not in _SAVED_PROVISIONAL:  # first failure of the law: keep it even if we are stopped
            _SAVED_PROVISIONAL[law] = corpus.save(law, case, error=message, target=identity(), device=r.device,
                                                  shrunk=False)
    except OSError as e:
        message += f"\n  (could not save the case: {e})"
    raise AssertionError(message)


def _require(law: str, info_: dict) -> None:
    """Skip (under pytest) or raise NotApplicable when the law cannot run on this target/lane."""
    from types import SimpleNamespace

    from .checks import LAWS
    from .target import NotApplicable

    t = SimpleNamespace(is_cuda=info_["device"].startswith("cuda"), has_ops=info_["has_ops"],
                        has_backward=info_["has_backward"])
    why = LAWS[law].applicable(t)
    if why:
        try:
            import pytest
        except ImportError:
            raise NotApplicable(why) from None
        pytest.skip(f"{law}: {why}")


def lane() -> str:
    return lane_of(device())


def write_tally(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    if _RUNNER is not None:
        TALLY.worker = Counter(restarts=_RUNNER.restarts, kept=_RUNNER.kept_after_crash)
    p = directory / f"tally-{os.getpid()}-{int(time.time() * 1000)}.json"
    p.write_text(json.dumps(TALLY.to_json()))
    return p
