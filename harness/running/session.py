"""One process's run: the worker its target runs in, the contract it is held to (declared, or inferred from
its refusals), what it checked (harness.running.tally), the budget, and the saving of failing cases.

The laws' tests call ``check(law, case)``, the current session's method; which target and device they judge
comes from the environment (RMSNORM_TARGET, RMSNORM_DEVICE, RMSNORM_STRICT), which the pytest options and the
command line set. Tests need no fixtures, so they run under pytest, pytest-xdist, HypoFuzz and
``python -m harness fuzz`` alike.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import torch

from harness.judging import caps as interpreter_caps
from harness.judging.cases import Case
from harness.judging.contract import Contract, from_env
from harness.judging.laws import LAWS
from harness.judging.refusals import OWN_INPUT_LAWS, Inference, merge_classes
from harness.judging.target import NotApplicable
from harness.running import corpus, gpus, interrupts
from harness.running.loading import default_device
from harness.running.locations import command
from harness.running.spec import TargetSpec
from harness.running.tally import Tally
from harness.running.worker import THREADS_ENV, HarnessError, Runner, Verdict, cpu_threads, lane_of

BUDGET_ENV = "RMSNORM_BUDGET_END"  # epoch seconds after which no new case is drawn
ALONE_ENV = "RMSNORM_REPLAY_ALONE"  # "0": a failing case is not run again alone (mutate, which stops at the first)
ALONE = "alone, in a fresh process of the target,"  # how the note begins (replay finds it by this)
NOT_ALONE = (ALONE + " this case {verdict}: the failure needs calls made before it in "
             "this process (state kept between calls: compiled code or a buffer cached under too coarse a key, say), "
             "so replay will not reproduce it; laws outputs_kept and after_neighbours make such calls within one case")
REFUSED = "crashed on a valid input"  # how a refusal that no class explains is told (replay looks for it)


class GateFailure(AssertionError):
    """A law failed on the target. The message is the whole report: what was wrong, the
    diagnosis, the shrunk case, where it was saved and how to replay it."""


def device() -> str:
    return default_device()


def lane() -> str:
    return lane_of(device())


def lane_label() -> str:
    """The lane as the report and the verdict name it: CPU (Triton interpreter) for Triton code on the CPU."""
    return lane() + (" (Triton interpreter)" if TargetSpec.from_env().interpreted(device()) else "")


def strict() -> bool | None:
    v = os.environ.get("RMSNORM_STRICT")
    if v is None or v == "":
        return None
    if v not in ("0", "1"):
        raise ValueError(f"RMSNORM_STRICT: expected 0 or 1, but got {v!r}")
    return v == "1"


def deadline() -> float | None:
    """The run's wall-time budget's end (epoch seconds), or None without one."""
    end = os.environ.get(BUDGET_ENV)
    return float(end) if end else None


def _is_final() -> bool:
    try:
        # Hypothesis is there whenever a law's test runs; a plain call (replay, a script) has no build context.
        from hypothesis.control import current_build_context

        return bool(current_build_context().is_final)
    except Exception:  # noqa: BLE001 - outside Hypothesis: a single call is final
        return True


def _skip(law: str, why: str) -> None:
    """Skip under pytest (the summary lists it as not run), else NotApplicable."""
    try:
        import pytest  # under pytest a law's test is skipped; elsewhere (fuzz's own loop) NotApplicable says it
    except ImportError:
        raise NotApplicable(why) from None
    pytest.skip(f"{law}: {why}")


class Signatures:
    """What a compiler keys on, of each case drawn so far, in the order first drawn: (shape, dtype, weight
    dtype, layout, grad_layout, eps). Once the target is seen compiling on first use, the strategies draw
    most cases with one of these (properties/strategies.py), so that they run already-compiled code, and a
    new signature 1 case in NEW_SIGNATURE_ONE_IN. Append-only, so an index keeps meaning the same signature
    while Hypothesis shrinks."""

    def __init__(self) -> None:
        self.drawn: list[tuple] = []
        self._seen: set = set()
        self._compiling = {"seen": False, "key": None}

    def remember(self, case: Case) -> None:
        sig = (case.shape, case.dtype, case.weight_dtype, case.layout, case.grad_layout, case.eps)
        if sig not in self._seen and len(self.drawn) < 4096:
            self._seen.add(sig)
            self.drawn.append(sig)

    def compiles(self, tally: Tally) -> bool:
        """Whether the target has been seen compiling on first use in this run (sticky once seen)."""
        if not self._compiling["seen"]:
            key = (id(tally), len(tally.first_calls), len(tally.later_calls))
            if key != self._compiling["key"]:
                self._compiling["key"] = key
                self._compiling["seen"] = tally.compiling() is not None
        return self._compiling["seen"]


class Session:
    """What one process of a run holds: the target's worker, its contract, the evidence of its refusals,
    the tally, the cases drawn, and the failures found, saved and being shrunk."""

    def __init__(self, spec: TargetSpec | None = None) -> None:
        self.spec = spec or TargetSpec.from_env()
        self.tally = Tally()
        self.signatures = Signatures()
        self.failed_laws: set[str] = set()  # the budget never cuts their shrinking
        self.seed_origin: dict = {}  # (law, case) -> where a replayed case came from, when not the target's own corpus
        self._runner: Runner | None = None
        self._declared: Contract | None = None  # declared (or none declared): fixed for the run
        self._inference: Inference | None = None
        self._weights_refused: set[str] = set()
        self._not_judged: dict[str, str] = {}  # dtype -> why it cannot be judged where it runs (the interpreter's)
        self._identity: dict | None = None
        self._provisional: dict[str, Path] = {}  # law -> its first failing case, saved before shrinking
        self._failed_cases: dict = {}  # (law, case) -> the failing verdict, replayed once shrinking is past the budget

    # -- the worker ---------------------------------------------------------------------------------
    def runner(self) -> Runner:
        if self._runner is None:
            env = {}
            dev = device()
            wid = os.environ.get("PYTEST_XDIST_WORKER", "")
            if dev == "cuda" and "CUDA_VISIBLE_DEVICES" not in os.environ:
                count = torch.cuda.device_count()
                if count > 1 and wid.startswith("gw"):  # one GPU per xdist worker
                    env["CUDA_VISIBLE_DEVICES"] = str(int(wid[2:]) % count)
                elif count > 1:  # a process of its own (HypoFuzz's, say): the GPU the fewest others hold
                    env["CUDA_VISIBLE_DEVICES"] = str(gpus.claim(count))
            threads = cpu_threads()
            if threads:
                env[THREADS_ENV] = str(threads)
            runner = Runner(self.spec, dev, strict=strict(), env=env)
            runner.start()  # a target that does not load raises here, and the next call tries again
            atexit.register(runner.stop)
            self._runner = runner
            if runner.info.get("grads_by_autograd"):
                self.tally.grads_by_autograd = True
            if runner.info.get("interpreted"):
                probe = runner.info.get("interpreter") or {}
                self.tally.interpreted = True
                self.tally.interpreter = {"speed": probe.get("speed")}
                for dtype, why in (probe.get("not_judged") or {}).items():
                    self._note_not_judged(dtype, why)
        return self._runner

    # -- Triton's interpreter -------------------------------------------------------------------------
    def interpreted(self) -> bool:
        """Whether the target's kernels run under Triton's interpreter in this run (harness.running.spec)."""
        return self.spec.interpreted(device())

    def caps(self) -> "interpreter_caps.Caps | None":
        """The sizes this run draws inside besides the contract: the interpreter's caps, or None."""
        return interpreter_caps.INTERPRETER if self.interpreted() else None

    def _note_not_judged(self, dtype: str, why: str) -> None:
        """dtype cannot be judged where the target runs: drawn no more in this run, and said in the report."""
        self._not_judged.setdefault(dtype, why)
        self.tally.not_judged_why.setdefault(dtype, why)

    def stop_runner(self) -> None:
        if self._runner is not None:
            self._runner.stop()
            self._runner = None

    # -- the contract ---------------------------------------------------------------------------------
    def declared_contract(self) -> Contract:
        """The contract declared for the target (or none declared): fixed for the whole run, unlike contract().
        From the command line or RMSNORM_CONTRACT, else what its module declares (asked of the worker)."""
        if self._declared is None:
            c = from_env()
            if c is None:
                declared = self.runner().info.get("contract")
                c = Contract.from_dict(declared, f"declared by {self.spec}") if declared else Contract()
            self._declared = c
        return self._declared

    def contract(self, *, judged_only: bool = True) -> Contract:
        """The contract the run draws inside now: the declared one (with the weight layouts it let the target
        refuse, once refused), else the one inferred so far from the target's refusals; judged_only: without
        the dtypes that cannot be judged where the target runs (Triton's interpreter's bfloat16), which the
        report says apart."""
        c = self.declared_contract()
        if not c.declared and self._inference is not None and any(self._inference.classes.values()):
            c = self._inference.contract()
        elif self._weights_refused:
            c = dataclasses.replace(c, exclude=c.exclude + tuple(sorted(self._weights_refused)))
        gone = tuple(f"dtype={d}" for d in sorted(self._not_judged) if f"dtype={d}" not in c.exclude)
        return dataclasses.replace(c, exclude=c.exclude + gone) if judged_only and gone else c

    def adopt_contract(self, d: dict | None) -> None:
        """Take the contract a worker process of this run learned (Tally.contract), unless this process
        knows it already: the xdist controller reports without starting a worker of its own."""
        if self._declared is None and d:
            self._declared = Contract.from_json(d)

    @property
    def inference(self) -> Inference:
        """This process's evidence of what the target accepts and refuses, and the classes it established."""
        if self._inference is None:
            self._inference = Inference(has_backward=bool(self.runner().info.get("has_backward", True)))
        return self._inference

    def identity(self) -> dict:
        if self._identity is None:
            self._identity = self.spec.identity()
        return self._identity

    def compiles(self) -> bool:
        return self.signatures.compiles(self.tally)

    # -- judging a case -------------------------------------------------------------------------------
    def require(self, law: str, drawn: str | None = None) -> None:
        """Skip (under pytest) or raise NotApplicable when the law cannot run on this target and lane, or
        the contract leaves it nothing to draw. drawn: the strategy the law's cases come from, where it has
        several (forward_matches_reference_tall)."""
        info = self.runner().info
        t = SimpleNamespace(is_cuda=info["device"].startswith("cuda"), has_ops=info["has_ops"],
                            has_backward=info["has_backward"], spec=self.spec,
                            variant=self.declared_contract().variant, interpreted=bool(info.get("interpreted")))
        why = LAWS[law].applicable(t, drawn)
        if not why:
            nothing = self.contract().leaves_nothing_for(law, bool(info["has_backward"]))
            why = f"not applicable: {nothing}" if nothing else None
        if why:
            _skip(law, why)

    def check(self, law: str, case: Case, drawn: str | None = None) -> Verdict:
        """Run law on case in the worker; raise AssertionError on failure, crash or hang, after
        saving the case to the corpus (provisionally at once, for good once Hypothesis has shrunk it).
        drawn: the strategy the case came from, where the law has several (Session.require)."""
        interrupts.check()  # a Ctrl-C since the last case stops the run here
        r = self.runner()
        self.require(law, drawn)
        self.tally.applies.add(law)
        caps = self.caps()
        if caps is not None and not caps.allows(case):
            # A saved case larger than the interpreter's caps (from a compiled run, or another target's): not
            # run here, counted and named, as a saved case outside the contract is.
            name = f"{list(case.shape)} {case.dtype}"
            if name not in self.tally.outside_caps[law]:
                self.tally.outside_caps[law].append(name)
            return Verdict("not_applicable", "a saved case past the interpreter's caps")
        c = self.contract()
        if (c.declared or c.inferred) and not c.allows(case):
            # A saved case (this target's from a wider run, or a seed from another) can lie outside the
            # contract, and so can a case drawn where the contract leaves a law nothing else: the strategies
            # draw inside it otherwise. It is not this run's business, and it must not end the law (that
            # once skipped the whole test, and the gate passed on three laws): counted, named in the report,
            # and the law goes on to draw its own cases.
            name = f"{list(case.shape)} {case.dtype}/w:{case.weight_dtype} {case.layout}"
            if name not in self.tally.outside_contract[law]:
                self.tally.outside_contract[law].append(name)
            return Verdict("not_applicable", "a saved case outside the declared contract")
        self._budget_check(law)
        past = self._past_budget_shrinking(law, case)
        if past is not None:
            return past
        v = r.check(law, case, deadline=self._budget_end(law))
        if v.status == "cannot_interpret":
            # The interpreter could not run the kernel: the target is not judged (the gate's verdict says so).
            self.tally.cannot_interpret = self.tally.cannot_interpret or v.message.strip().splitlines()[0]
            self.tally.by_law[law]["cannot_interpret"] += 1  # so that this process's tally is written
            _skip(law, f"NOT JUDGED under the interpreter: {v.message.strip().splitlines()[0]}")
        if v.status == "not_judged":
            # bfloat16 the interpreter computes on raw bits: neither passed nor failed, and drawn no more.
            self._note_not_judged(v.facts.get("dtype") or case.dtype, v.message.strip())
            self.tally.by_law[law]["not_judged"] += 1
            self.tally.seconds[law] += v.seconds
            return v
        if v.status == "cut_short":
            self.tally.cut_short[law] += 1
            _skip(law, f"cut short by the wall-time budget (--budget) with a case still running: {case.short()}")
        if v.status == "no_room":
            # The GPU had too little free memory for the case: the law ends here as not run on this GPU
            # (what it checked before is counted), never as passed and never as the target's failure.
            why = v.message.strip().splitlines()[0] if v.message.strip() else "too little free GPU memory"
            self.tally.no_room.setdefault(law, why)
            _skip(law, f"not run on this GPU: {why}")
        if v.status == "rejected" and c.declared and not c.weight_layout_refusable(case):
            # Every law draws inside a declared contract, gradcheck too; a weight that is not contiguous may
            # be refused where the contract does not name weight layouts (harness.judging.contract).
            v = Verdict("fail", f"{v.message}\n  (refused an input inside the target's "
                                f"{c.describe().split(' (drawn')[0]})\n  case: {case.short()}", v.facts, v.seconds)
        elif v.status == "rejected" and c.declared:
            self._weights_refused.add(f"weight_layout={case.weight_layout}")  # allowed: drawn no more in this run
        elif v.status == "rejected" and not c.declared and law not in OWN_INPUT_LAWS:
            v = self._judge_refusal(law, case, v, r)
        if v.status in ("pass", "fail"):
            self.inference.note(law, case, v.status)
        self.tally.add(law, case, v)
        if v.status in ("pass", "rejected"):
            return v
        if v.status == "not_applicable":
            raise HarnessError(f"law {law} drew a case it does not apply to ({v.message}): fix its strategy")
        self.failed_laws.add(law)
        self._failed_cases[(law, case)] = v
        message = f"[{v.status}] {v.message}"
        if (law, case) in self.seed_origin:
            message += f"\n  (this case is {self.seed_origin[(law, case)]})"
        if _is_final():
            message = self._save_final(law, case, v, message)
        elif law not in self._provisional:  # first failure of the law: keep it even if we are stopped
            try:
                self._provisional[law] = corpus.save(law, case, error=message, target=self.identity(),
                                                     device=r.device, shrunk=False)
                self.tally.unfinished[law] = {"law": law, "status": v.status, "file": str(self._provisional[law]),
                                              "message": v.message.splitlines()[0][:300] if v.message else v.status,
                                              "case": case.short()}
            except OSError as e:
                message += f"\n  (could not save the case: {e})"
        _raise_failure(message)

    def _judge_refusal(self, law: str, case: Case, v: Verdict, r: Runner) -> Verdict:
        """Without a declared contract: the refusal stands where a class of inputs explains it
        (harness.judging.refusals), and is the law's failure where none does: a crash on a valid input."""
        inf = self.inference
        inf.note(law, case, "rejected", v.message)

        def ask(other_law: str, other: Case) -> tuple[str, str]:
            verdict = r.check(other_law, other, deadline=self._budget_end(law))
            return verdict.status, verdict.message

        finding = inf.judge(law, case, v.message, ask)
        first = v.message.strip().splitlines()[0] if v.message.strip() else "(no message)"
        if finding.explained_by:
            return Verdict("rejected", f"{first} ({finding.message})", v.facts, v.seconds)
        return Verdict("crash", f"{REFUSED}: {first}\n  {finding.message}\n  case: {case.short()}", v.facts,
                       v.seconds)

    def _alone(self, law: str, case: Case) -> "Verdict | None":
        """The law on the case in a fresh worker process of the same target, as replay runs it; None where
        not run ($RMSNORM_REPLAY_ALONE=0, past the wall-time budget, or the target did not load)."""
        end = deadline()
        if os.environ.get(ALONE_ENV, "1") == "0" or (end is not None and time.time() >= end):
            return None
        main = self.runner()
        fresh = Runner(main.spec, main.device, strict=main.strict, timeout_s=main.timeout_s, env=main.env)
        try:
            return fresh.check(law, case, deadline=end)
        except HarnessError:
            return None
        finally:
            fresh.stop()

    def _save_final(self, law: str, case: Case, v: Verdict, message: str) -> str:
        """Save the shrunk failing case (in place of the law's provisional one) and record it; then run it
        alone in a fresh process, and say so where it does not fail there (saved again with that said);
        message with where it went and how to replay it."""
        device_ = self.runner().device
        try:
            path = corpus.save(law, case, error=message, target=self.identity(), device=device_, shrunk=True)
        except OSError as e:
            return message + f"\n  (could not save the case: {e})"
        prev = self._provisional.pop(law, None)
        self.tally.unfinished.pop(law, None)
        if prev is not None and prev != path:
            prev.unlink(missing_ok=True)
        failure = {"law": law, "status": v.status, "file": str(path), "message": v.message, "case": case.to_dict()}
        self.tally.failures.append(failure)
        alone = self._alone(law, case) if v.status in ("fail", "crash") else None  # a hang would cost its timeout again
        # A refusal no class explains is the failure itself: refused alone too, it reproduces.
        reproduced = alone is not None and alone.status == "rejected" and REFUSED in (v.message or "")
        if alone is not None and alone.status in ("pass", "rejected") and not reproduced:
            failure["alone"] = alone.status
            message += "\n  " + NOT_ALONE.format(verdict="passes" if alone.status == "pass" else "is refused")
            try:
                corpus.save(law, case, error=message, target=self.identity(), device=device_, shrunk=True)
            except OSError as e:
                message += f"\n  (could not save that with the case: {e})"
        return message + f"\n  saved: {path}\n  replay: {command()} replay {path}"

    # -- the budget -----------------------------------------------------------------------------------
    def _budget_end(self, law: str) -> float | None:
        """The wall-time budget's end for a case of law, or None (no budget, or the law failed: its
        shrinking is never cut)."""
        return deadline() if law not in self.failed_laws else None

    def _budget_check(self, law: str) -> None:
        """Past the run's wall-time budget, a law that has not failed stops drawing: its test ends as
        skipped ("cut short"), and what it checked is still judged against the coverage floor."""
        end = deadline()
        if end is not None and time.time() > end and law not in self.failed_laws:
            self.tally.cut_short[law] += 1
            _skip(law, "cut short by the wall-time budget (--budget)")

    def _past_budget_shrinking(self, law: str, case: Case) -> "Verdict | None":
        """Past the wall-time budget, a failed law's shrinking stops: a case already seen failing fails
        again as it did (Hypothesis replays its best one at the end), any other is not run and stands
        as not failing, so the shrinker ends on what it has, at once. None: run the case."""
        end = deadline()
        if end is None or law not in self.failed_laws or time.time() <= end:
            return None
        self.tally.shrink_cut[law] += 1
        known = self._failed_cases.get((law, case))
        if known is None:
            return Verdict("pass", "not run: shrinking cut short by the wall-time budget", {}, 0.0)
        message = (f"[{known.status}] {known.message}\n  (shrinking cut short by the wall-time budget: a smaller "
                   "case may fail too)")
        if _is_final():
            message = self._save_final(law, case, known, message)
        _raise_failure(message)

    # -- the record ---------------------------------------------------------------------------------
    def write_tally(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        t = self.tally
        if self._runner is not None:
            t.worker = Counter(restarts=self._runner.restarts, kept=self._runner.kept_after_crash)
        if self._declared is not None:
            t.contract = self._declared.to_json()
        if self._inference is not None:
            t.classes = {}
            merge_classes(t.classes, self._inference.classes)
            t.contradicted = list(self._inference.contradicted)
        p = directory / f"tally-{os.getpid()}-{int(time.time() * 1000)}.json"
        p.write_text(json.dumps(t.to_json()))
        return p


def _raise_failure(message: str) -> None:
    """Every failure of a law is raised here, on one line: Hypothesis tells failures apart by where
    they were raised, and a failure replayed once shrinking is past the budget must be the same one."""
    raise GateFailure(message)


_CURRENT: Session | None = None


def current() -> Session:
    """This process's session, started on first use (the laws' tests need no fixture)."""
    global _CURRENT
    if _CURRENT is None:
        _CURRENT = Session()
    return _CURRENT


def use(session: Session | None) -> None:
    """Make session this process's current one (None: a fresh one on next use)."""
    global _CURRENT
    _CURRENT = session


def check(law: str, case: Case, drawn: str | None = None) -> Verdict:
    """What each law's test calls: the current session's check (drawn: Session.check's)."""
    return current().check(law, case, drawn)
