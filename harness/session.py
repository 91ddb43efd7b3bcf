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
from .locations import command
from .cases import Case
from .refusals import OWN_INPUT_LAWS, Inference, cause_of
from .target import default_device, identity_of, parse_spec
from .worker import HarnessError, Runner, Verdict, lane_of

_RUNNER: Runner | None = None
_CONTRACT = None
FAILED_LAWS: set[str] = set()  # laws that failed in this process: the budget never cuts their shrinking
SEED_ORIGIN: dict = {}  # (law, case) -> where a replayed case came from, when not the target's own corpus
_IDENTITY: dict | None = None
_SAVED_PROVISIONAL: dict[str, Path] = {}


class Tally:
    """What each law checked, what the target rejected (by case category), what failed."""

    def __init__(self) -> None:
        self.by_law: dict[str, Counter] = defaultdict(Counter)
        self.rejected_by_cat: dict[str, Counter] = defaultdict(Counter)
        self.seen_by_cat: dict[str, Counter] = defaultdict(Counter)
        self.reject_examples: dict[str, str] = {}
        # (refusal message with numbers blanked, the case's categories and N) for each refusal, and
        # (categories, N) of each accepted case: what the summary explains the refusals by.
        self.refusals: list[tuple[str, dict, int]] = []
        self.accepted: list[tuple[dict, int]] = []
        self.seconds: Counter = Counter()
        self.unverified_rows = 0
        self.failures: list[dict] = []
        # law -> its first failing case, saved before shrinking, while the law's test has not ended: a
        # run stopped then (Ctrl-C, SIGTERM, a campaign's end) has failed all the same.
        self.unfinished: dict[str, dict] = {}
        self.cut_short: Counter = Counter()  # laws the wall-time budget stopped
        self.no_room: dict[str, str] = {}  # laws whose case needed more GPU memory than was free: why
        self.shrink_cut: Counter = Counter()  # failed laws whose shrinking the budget stopped: candidates not run
        # Laws that reached a case with the target able to run them (they apply on this target and
        # lane): each must check its floor, whatever became of its cases.
        self.applies: set[str] = set()
        # law -> saved cases outside the declared contract (not applicable: counted, named, not judged)
        self.outside_contract: dict[str, list[str]] = defaultdict(list)
        self.worker = Counter()  # restarts (after crashes and hangs), kept (carried on after a CUDA error)
        # Calls into the target: (N, seconds) of each first call at a new signature, and the
        # seconds of the others (a sample): how much of the run went to compiling.
        self.first_calls: list[tuple[int, float]] = []
        self.later_calls: list[float] = []
        # dtype -> output (y, grad_x) -> each passing case's worst error against float64, in units of
        # the dtype's rounding of the row's largest value (judge.worst_units), over cases of ordinary
        # values (ACCURACY_PATTERNS): the target's accuracy.
        self.errors: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        self.worst_error: dict[str, tuple] = {}  # "dtype output" -> (units, law, case): where the worst one was
        # The contract the target was held to (Contract.to_json), as a worker learned it: the
        # process that reports (an xdist controller) need not load the target to ask.
        self.contract: dict | None = None
        # Without a declared contract: the classes of inputs that explained the target's refusals
        # (harness.refusals), per direction, and the classes an accepted case later fell in.
        self.classes: dict[str, dict[str, dict]] = {}
        self.contradicted: list[str] = []

    def add_calls(self, calls) -> None:
        for n, first, secs in calls or ():
            if first:
                self.first_calls.append((int(n), float(secs)))
            elif len(self.later_calls) < 4096:
                self.later_calls.append(float(secs))

    def add(self, law: str, case: Case, v: Verdict) -> None:
        self.by_law[law][v.status] += 1
        self.seconds[law] += v.seconds
        self.add_calls(v.facts.get("calls") if v.facts else None)
        self.unverified_rows += int(v.facts.get("unverified_rows", 0)) if v.facts else 0
        if law in _OWN_DTYPE_LAWS:
            return  # it ran in another dtype than the case's: its refusals say nothing about the case's categories
        ordinary = case.pattern in ACCURACY_PATTERNS and case.grad_pattern == "normal"
        for out, units in ((v.facts or {}).get("err") or {}).items() if ordinary else ():
            if len(self.errors[case.dtype][out]) < 4096:
                self.errors[case.dtype][out].append(float(units))
            key = f"{case.dtype} {out}"
            if units > self.worst_error.get(key, (0.0,))[0]:
                self.worst_error[key] = (float(units), law, case.short())
        if v.status == "rejected":
            self.refusals.append((cause_of(v.message), case.categories(), case.n))
        elif v.status in ("pass", "fail"):
            self.accepted.append((case.categories(), case.n))
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
            "refusals": self.refusals,
            "accepted": self.accepted,
            "seconds": dict(self.seconds),
            "unverified_rows": self.unverified_rows,
            "failures": self.failures,
            "unfinished": self.unfinished,
            "worker": dict(self.worker),
            "cut_short": dict(self.cut_short),
            "no_room": self.no_room,
            "shrink_cut": dict(self.shrink_cut),
            "applies": sorted(self.applies),
            "outside_contract": {k: v for k, v in self.outside_contract.items()},
            "first_calls": self.first_calls,
            "later_calls": self.later_calls,
            "errors": {d: dict(outs) for d, outs in self.errors.items()},
            "worst_error": self.worst_error,
            "contract": self.contract,
            "classes": self.classes,
            "contradicted": self.contradicted,
        }

    @classmethod
    def read(cls, directory: Path) -> "Tally":
        """The tallies the processes of one run wrote into directory (write_tally), merged; empty where none."""
        t = cls()
        if directory.is_dir():
            for p in sorted(directory.glob("tally-*.json")):
                t.merge(json.loads(p.read_text()))
        return t

    def merge(self, d: dict) -> None:
        for k, c in d.get("by_law", {}).items():
            self.by_law[k].update(c)
        for k, c in d.get("rejected_by_cat", {}).items():
            self.rejected_by_cat[k].update(c)
        for k, c in d.get("seen_by_cat", {}).items():
            self.seen_by_cat[k].update(c)
        self.reject_examples.update(d.get("reject_examples", {}))
        self.refusals += [tuple(r) for r in d.get("refusals", [])]
        self.accepted += [tuple(a) for a in d.get("accepted", [])]
        self.seconds.update(d.get("seconds", {}))
        self.unverified_rows += d.get("unverified_rows", 0)
        self.failures += d.get("failures", [])
        for law, f in d.get("unfinished", {}).items():
            self.unfinished.setdefault(law, f)
        self.worker.update(d.get("worker", {}))
        if d.get("contract") is not None:
            self.contract = d["contract"]
        from .refusals import merge_classes

        merge_classes(self.classes, d.get("classes", {}))
        self.contradicted += [c for c in d.get("contradicted", []) if c not in self.contradicted]
        self.cut_short.update(d.get("cut_short", {}))
        for law, why in d.get("no_room", {}).items():
            self.no_room.setdefault(law, why)
        self.shrink_cut.update(d.get("shrink_cut", {}))
        self.applies |= set(d.get("applies", []))
        for k, names in d.get("outside_contract", {}).items():
            self.outside_contract[k] += [n for n in names if n not in self.outside_contract[k]]
        self.first_calls += [tuple(c) for c in d.get("first_calls", [])]
        self.later_calls += d.get("later_calls", [])
        for dt, outs in d.get("errors", {}).items():
            for out, values in outs.items():
                self.errors[dt][out] += values
        for key, worst in d.get("worst_error", {}).items():
            if worst[0] > self.worst_error.get(key, (0.0,))[0]:
                self.worst_error[key] = tuple(worst)

    def compiling(self) -> "Compiling | None":
        """What the target spent compiling, when its calls say it compiles on first use: first calls
        at a new signature (N, dtypes, strides, eps) that take at least SLOW_FIRST_CALL_S and 10 times
        the median later call, 3 of them or more, and at least a fifth of the first calls."""
        import statistics

        if len(self.later_calls) < 3 or len(self.first_calls) < 3:
            return None
        typical = statistics.median(self.later_calls)
        slow = [(n, t) for n, t in self.first_calls if t >= SLOW_FIRST_CALL_S and t >= 10 * typical]
        if len(slow) < 3 or len(slow) * 5 < len(self.first_calls):
            return None
        return Compiling(seconds=sum(t - typical for _, t in slow), calls=len(slow),
                         lengths=len({n for n, _ in slow}), typical=typical)


SLOW_FIRST_CALL_S = 0.2  # a first call slower than this (and than 10 later calls) is taken for a compile


class Compiling:
    """Time a target spent in first calls at new signatures, beyond what its calls usually take."""

    def __init__(self, *, seconds: float, calls: int, lengths: int, typical: float) -> None:
        self.seconds, self.calls, self.lengths, self.typical = seconds, calls, lengths, typical

    def line(self) -> str:
        return (f"compiling: {self.seconds:.0f} s in {self.calls} first calls at new signatures, {self.lengths} row "
                f"lengths (a call otherwise takes {self.typical * 1e3:.1f} ms); cases were drawn mostly from "
                f"signatures already compiled, a new one 1 case in {NEW_SIGNATURE_ONE_IN}")


NEW_SIGNATURE_ONE_IN = 16  # once a target is seen compiling: how often a case brings a new signature
SIGNATURE_POOL = 8  # and of how many signatures (per law, the first drawn that fit it) the others pick one


# Laws that run the target in another dtype than the case's (gradcheck: float64, else float32),
# so a refusal there says nothing about the case's dtype, nor about the declared dtypes.
_OWN_DTYPE_LAWS = OWN_INPUT_LAWS
# The value patterns whose errors make the accuracy figure. The others (huge, tiny, spikes, constant
# rows, grad_out like y) are judged as strictly, but an error relative to a row's largest value
# there measures the input (a gradient that cancels to almost nothing), not the target.
ACCURACY_PATTERNS = ("normal", "uniform")


TALLY = Tally()


class GateFailure(AssertionError):
    """A law failed on the target. The message is the whole report: what was wrong, the
    diagnosis, the shrunk case, where it was saved and how to replay it."""


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


THREADS_ENV = "RMSNORM_CPU_THREADS"  # torch's CPU threads in the target's worker process
SHARERS_ENV = "RMSNORM_PROCESSES"  # processes of one run judging side by side (a fuzz campaign's workers)


def cpu_threads() -> int | None:
    """torch's CPU threads for this process's target worker: RMSNORM_CPU_THREADS when set; else,
    when K processes judge side by side (pytest-xdist's workers, a fuzz campaign's), the cores
    divided among them. Each would otherwise start a thread per core, and K times the cores'
    threads spinning against each other made `gate -n 2` on 2 cores take 40 s against 19 s
    without -n; one thread each, 17 s."""
    v = os.environ.get(THREADS_ENV, "")
    if v:
        if not v.isdigit() or int(v) < 1:
            raise ValueError(f"{THREADS_ENV}: expected a whole number >= 1, but got {v!r}")
        return int(v)
    k = os.environ.get("PYTEST_XDIST_WORKER_COUNT") or os.environ.get(SHARERS_ENV) or "1"
    return share_of_cores(int(k) if k.isdigit() else 1)


def share_of_cores(processes: int) -> int | None:
    """torch's CPU threads for each of `processes` judging side by side (None: one process, torch's own)."""
    return max(1, (os.cpu_count() or 1) // processes) if processes > 1 else None


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
        elif dev == "cuda" and "CUDA_VISIBLE_DEVICES" not in os.environ:
            import torch

            count = torch.cuda.device_count()
            if count > 1:  # a process of its own (HypoFuzz's, say): the GPU the fewest others hold
                from .gpus import claim

                env["CUDA_VISIBLE_DEVICES"] = str(claim(count))
        threads = cpu_threads()
        if threads:
            env[THREADS_ENV] = str(threads)
        _RUNNER = Runner(target_spec(), dev, strict=strict(), env=env)
        _RUNNER.start()
        atexit.register(_RUNNER.stop)
    return _RUNNER


def stop_runner() -> None:
    global _RUNNER
    if _RUNNER is not None:
        _RUNNER.stop()
        _RUNNER = None


def contract():
    """The target's contract: from the command line or RMSNORM_CONTRACT, else what its module
    declares (asked of the worker), else the one inferred so far from its refusals (harness.refusals)."""
    global _CONTRACT
    if _CONTRACT is None:
        from .contract import Contract, from_env

        c = from_env()
        if c is None:
            declared = runner().info.get("contract")
            c = Contract.from_dict(declared, f"declared by {target_spec()}") if declared else Contract()
        _CONTRACT = c
    if not _CONTRACT.declared and _INFERENCE is not None and (_INFERENCE.classes["forward"]
                                                              or _INFERENCE.classes["backward"]):
        return _INFERENCE.contract()
    if _WEIGHTS_REFUSED:  # the weight layouts a declared contract lets the target refuse, once refused
        import dataclasses

        return dataclasses.replace(_CONTRACT, exclude=_CONTRACT.exclude + tuple(sorted(_WEIGHTS_REFUSED)))
    return _CONTRACT


_WEIGHTS_REFUSED: set[str] = set()

def declared_contract():
    """The contract declared for the target (or none declared): fixed for the whole run, unlike contract()."""
    contract()
    return _CONTRACT


_INFERENCE: Inference | None = None


def inference() -> Inference:
    """This process's evidence of what the target accepts and refuses, and the classes it established."""
    global _INFERENCE
    if _INFERENCE is None:
        _INFERENCE = Inference(has_backward=bool(runner().info.get("has_backward", True)))
    return _INFERENCE


def adopt_contract(d: dict | None) -> None:
    """Take the contract a worker process of this run learned (Tally.contract), unless this process
    knows it already: the xdist controller reports without starting a worker of its own."""
    global _CONTRACT
    if _CONTRACT is None and d:
        from .contract import Contract

        _CONTRACT = Contract.from_json(d)


# What a compiler keys on, of each case drawn so far, in the order first drawn: (shape, dtype, weight
# dtype, layout, grad_layout, eps). Once the target is seen compiling on first use, the strategies
# draw most cases with one of these (properties/strategies.py), so that they run already-compiled
# code, and a new signature 1 case in NEW_SIGNATURE_ONE_IN. Append-only, so an index keeps meaning
# the same signature while Hypothesis shrinks.
SIGNATURES: list[tuple] = []
_SIGNATURE_SET: set = set()
_COMPILING = {"seen": False, "key": None}


def remember_signature(case: Case) -> None:
    sig = (case.shape, case.dtype, case.weight_dtype, case.layout, case.grad_layout, case.eps)
    if sig not in _SIGNATURE_SET and len(SIGNATURES) < 4096:
        _SIGNATURE_SET.add(sig)
        SIGNATURES.append(sig)


def compiles() -> bool:
    """Whether the target has been seen compiling on first use in this run (sticky once seen)."""
    if not _COMPILING["seen"]:
        key = (id(TALLY), len(TALLY.first_calls), len(TALLY.later_calls))
        if key != _COMPILING["key"]:
            _COMPILING["key"] = key
            _COMPILING["seen"] = TALLY.compiling() is not None
    return _COMPILING["seen"]


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
    from . import interrupts

    interrupts.check()  # a Ctrl-C since the last case stops the run here
    r = runner()
    _require(law, r.info)
    TALLY.applies.add(law)
    c = contract()
    if (c.declared or c.inferred) and not c.allows(case):
        # A saved case (this target's from a wider run, or a seed from another) can lie outside the
        # contract, and so can a case drawn where the contract leaves a law nothing else: the strategies
        # draw inside it otherwise. It is not this run's business, and it must not end the law (that
        # once skipped the whole test, and the gate passed on three laws): counted, named in the report,
        # and the law goes on to draw its own cases.
        name = f"{list(case.shape)} {case.dtype}/w:{case.weight_dtype} {case.layout}"
        if name not in TALLY.outside_contract[law]:
            TALLY.outside_contract[law].append(name)
        return Verdict("not_applicable", "a saved case outside the declared contract")
    _budget_check(law)
    past = _past_budget_shrinking(law, case)
    if past is not None:
        return past
    v = r.check(law, case, deadline=_budget_end(law))
    if v.status == "cut_short":
        TALLY.cut_short[law] += 1
        _skip(law, f"cut short by the wall-time budget (--budget) with a case still running: {case.short()}")
    if v.status == "no_room":
        # The GPU had too little free memory for the case: the law ends here as not run on this GPU
        # (what it checked before is counted), never as passed and never as the target's failure.
        why = v.message.strip().splitlines()[0] if v.message.strip() else "too little free GPU memory"
        TALLY.no_room.setdefault(law, why)
        _skip(law, f"not run on this GPU: {why}")
    if v.status == "rejected" and c.declared and not c.weight_layout_refusable(case):
        # Every law draws inside a declared contract, gradcheck too; a weight that is not contiguous may
        # be refused where the contract does not name weight layouts (harness.contract).
        v = Verdict("fail", f"{v.message}\n  (refused an input inside the target's {c.describe().split(' (drawn')[0]})"
                            f"\n  case: {case.short()}", v.facts, v.seconds)
    elif v.status == "rejected" and c.declared:
        _WEIGHTS_REFUSED.add(f"weight_layout={case.weight_layout}")  # allowed: drawn no more in this run
    elif v.status == "rejected" and not c.declared and law not in OWN_INPUT_LAWS:
        v = _judge_refusal(law, case, v, r)
    if v.status in ("pass", "fail"):
        inference().note(law, case, v.status)
    TALLY.add(law, case, v)
    if v.status in ("pass", "rejected"):
        return v
    if v.status == "not_applicable":
        raise HarnessError(f"law {law} drew a case it does not apply to ({v.message}): fix its strategy")
    FAILED_LAWS.add(law)
    _FAILED_CASES[(law, case)] = v
    message = f"[{v.status}] {v.message}"
    if (law, case) in SEED_ORIGIN:
        message += f"\n  (this case is {SEED_ORIGIN[(law, case)]})"
    if _is_final():
        message = _save_final(law, case, v, message)
    elif law not in _SAVED_PROVISIONAL:  # first failure of the law: keep it even if we are stopped
        try:
            _SAVED_PROVISIONAL[law] = corpus.save(law, case, error=message, target=identity(), device=r.device,
                                                  shrunk=False)
            TALLY.unfinished[law] = {"law": law, "status": v.status, "file": str(_SAVED_PROVISIONAL[law]),
                                     "message": v.message.splitlines()[0][:300] if v.message else v.status}
        except OSError as e:
            message += f"\n  (could not save the case: {e})"
    _raise_failure(message)


def _judge_refusal(law: str, case: Case, v: Verdict, r: Runner) -> Verdict:
    """Without a declared contract: the refusal stands where a class of inputs explains it
    (harness.refusals), and is the law's failure where none does: a crash on a valid input."""
    inf = inference()
    inf.note(law, case, "rejected", v.message)

    def ask(other_law: str, other: Case) -> tuple[str, str]:
        verdict = r.check(other_law, other, deadline=_budget_end(law))
        return verdict.status, verdict.message

    finding = inf.judge(law, case, v.message, ask)
    first = v.message.strip().splitlines()[0] if v.message.strip() else "(no message)"
    if finding.explained_by:
        return Verdict("rejected", f"{first} ({finding.message})", v.facts, v.seconds)
    return Verdict("crash", f"{REFUSED}: {first}\n  {finding.message}\n  case: {case.short()}", v.facts, v.seconds)


REFUSED = "crashed on a valid input"  # how a refusal that no class explains is told (replay looks for it)


ALONE_ENV = "RMSNORM_REPLAY_ALONE"  # "0": a failing case is not run again alone (mutate, which stops at the first)

ALONE = "alone, in a fresh process of the target,"  # how the note begins (replay finds it by this)
NOT_ALONE = (ALONE + " this case {verdict}: the failure needs calls made before it in "
             "this process (state kept between calls: compiled code or a buffer cached under too coarse a key, say), "
             "so replay will not reproduce it; laws outputs_kept and after_neighbours make such calls within one case")


def _alone(law: str, case: Case) -> "Verdict | None":
    """The law on the case in a fresh worker process of the same target, as replay runs it; None where
    not run ($RMSNORM_REPLAY_ALONE=0, past the wall-time budget, or the target did not load)."""
    end = _deadline()
    if os.environ.get(ALONE_ENV, "1") == "0" or (end is not None and time.time() >= end):
        return None
    main = runner()
    fresh = Runner(main.spec, main.device, strict=main.strict, timeout_s=main.timeout_s, env=main.env)
    try:
        return fresh.check(law, case, deadline=end)
    except HarnessError:
        return None
    finally:
        fresh.stop()


def _save_final(law: str, case: Case, v: Verdict, message: str) -> str:
    """Save the shrunk failing case (in place of the law's provisional one) and record it; then run it
    alone in a fresh process, and say so where it does not fail there (saved again with that said);
    message with where it went and how to replay it."""
    try:
        path = corpus.save(law, case, error=message, target=identity(), device=runner().device, shrunk=True)
    except OSError as e:
        return message + f"\n  (could not save the case: {e})"
    prev = _SAVED_PROVISIONAL.pop(law, None)
    TALLY.unfinished.pop(law, None)
    if prev is not None and prev != path:
        prev.unlink(missing_ok=True)
    failure = {"law": law, "status": v.status, "file": str(path), "message": v.message, "case": case.to_dict()}
    TALLY.failures.append(failure)
    alone = _alone(law, case) if v.status in ("fail", "crash") else None  # a hang would cost its timeout again
    # A refusal no class explains is the failure itself: refused alone too, it reproduces.
    reproduced = alone is not None and alone.status == "rejected" and REFUSED in (v.message or "")
    if alone is not None and alone.status in ("pass", "rejected") and not reproduced:
        failure["alone"] = alone.status
        message += "\n  " + NOT_ALONE.format(verdict="passes" if alone.status == "pass" else "is refused")
        try:
            corpus.save(law, case, error=message, target=identity(), device=runner().device, shrunk=True)
        except OSError as e:
            message += f"\n  (could not save that with the case: {e})"
    return message + f"\n  saved: {path}\n  replay: {command()} replay {path}"


def unfinished_failures(t: "Tally") -> list[dict]:
    """The laws that had failed when the run stopped, their shrinking not ended (no final case of
    theirs recorded): each with its first failing case, saved unshrunk."""
    final = {f["law"] for f in t.failures}
    return [f for law, f in sorted(t.unfinished.items()) if law not in final]


def _require(law: str, info_: dict) -> None:
    """Skip (under pytest) or raise NotApplicable when the law cannot run on this target/lane."""
    from types import SimpleNamespace

    from .laws import LAWS
    from .target import NotApplicable

    t = SimpleNamespace(is_cuda=info_["device"].startswith("cuda"), has_ops=info_["has_ops"],
                        has_backward=info_["has_backward"], spec=target_spec())
    why = LAWS[law].applicable(t)
    if not why:
        nothing = contract().leaves_nothing_for(law, bool(info_["has_backward"]))
        why = f"not applicable: {nothing}" if nothing else None
    if why:
        try:
            import pytest
        except ImportError:
            raise NotApplicable(why) from None
        pytest.skip(f"{law}: {why}")


BUDGET_ENV = "RMSNORM_BUDGET_END"  # epoch seconds after which no new case is drawn


def _raise_failure(message: str) -> None:
    """Every failure of a law is raised here, on one line: Hypothesis tells failures apart by where
    they were raised, and a failure replayed once shrinking is past the budget must be the same one."""
    raise GateFailure(message)


_FAILED_CASES: dict = {}  # (law, case) -> the failing verdict: replayed as it was once shrinking is past the budget


def _past_budget_shrinking(law: str, case: Case) -> "Verdict | None":
    """Past the wall-time budget, a failed law's shrinking stops: a case already seen failing fails
    again as it did (Hypothesis replays its best one at the end), any other is not run and stands
    as not failing, so the shrinker ends on what it has, at once. None: run the case."""
    end = _deadline()
    if end is None or law not in FAILED_LAWS or time.time() <= end:
        return None
    TALLY.shrink_cut[law] += 1
    known = _FAILED_CASES.get((law, case))
    if known is None:
        return Verdict("pass", "not run: shrinking cut short by the wall-time budget", {}, 0.0)
    message = f"[{known.status}] {known.message}\n  (shrinking cut short by the wall-time budget: a smaller case may fail too)"
    if _is_final():
        message = _save_final(law, case, known, message)
    _raise_failure(message)


def _deadline() -> float | None:
    """The run's wall-time budget's end (epoch seconds), or None without one."""
    end = os.environ.get(BUDGET_ENV)
    return float(end) if end else None


def _budget_end(law: str) -> float | None:
    """The wall-time budget's end for a case of law, or None (no budget, or the law failed: its
    shrinking is never cut)."""
    return _deadline() if law not in FAILED_LAWS else None


def _budget_check(law: str) -> None:
    """Past the run's wall-time budget, a law that has not failed stops drawing: its test ends as
    skipped ("cut short"), and what it checked is still judged against the coverage floor."""
    end = _deadline()
    if end is not None and time.time() > end and law not in FAILED_LAWS:
        TALLY.cut_short[law] += 1
        _skip(law, "cut short by the wall-time budget (--budget)")


def _skip(law: str, why: str) -> None:
    """Skip under pytest (the summary lists it as not run), else NotApplicable."""
    from .target import NotApplicable

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
    if _CONTRACT is not None:
        TALLY.contract = _CONTRACT.to_json()
    if _INFERENCE is not None:
        TALLY.classes = {}
        from .refusals import merge_classes

        merge_classes(TALLY.classes, _INFERENCE.classes)
        TALLY.contradicted = list(_INFERENCE.contradicted)
    p = directory / f"tally-{os.getpid()}-{int(time.time() * 1000)}.json"
    p.write_text(json.dumps(TALLY.to_json()))
    return p
