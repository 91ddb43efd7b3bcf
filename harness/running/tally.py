"""What one run checked: per law the cases passed, refused, failed and the seconds spent; the refusals and the
classes of inputs that explained them; the failures saved and the ones stopped while shrinking; the calls into
the target (what tells a target that compiles on first use); the target's accuracy. Each process of a run
writes its own (Session.write_tally) and the process that reports merges them (Tally.read)."""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path

from harness.judging.cases import Case
from harness.judging.refusals import OWN_INPUT_LAWS, cause_of, merge_classes
from harness.running.worker import Verdict


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
        # (harness.judging.refusals), per direction, and the classes an accepted case later fell in.
        self.classes: dict[str, dict[str, dict]] = {}
        self.contradicted: list[str] = []
        # Triton's interpreter (harness.running.interpreter): whether the target ran under it, what its
        # worker measured, the dtypes it cannot judge there and why, the saved cases past its caps, and
        # what it could not run (the target is then not judged at all).
        self.interpreted = False
        self.grads_by_autograd = False  # the target has no backward: its gradients judged through autograd
        self.interpreter: dict = {}
        self.not_judged_why: dict[str, str] = {}
        self.outside_caps: dict[str, list[str]] = defaultdict(list)
        self.cannot_interpret = ""

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
            "interpreted": self.interpreted,
            "grads_by_autograd": self.grads_by_autograd,
            "interpreter": self.interpreter,
            "not_judged_why": self.not_judged_why,
            "outside_caps": {k: v for k, v in self.outside_caps.items()},
            "cannot_interpret": self.cannot_interpret,
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
        self.interpreted = self.interpreted or bool(d.get("interpreted"))
        self.grads_by_autograd = self.grads_by_autograd or bool(d.get("grads_by_autograd"))
        self.interpreter = self.interpreter or d.get("interpreter", {})
        for dtype, why in d.get("not_judged_why", {}).items():
            self.not_judged_why.setdefault(dtype, why)
        for k, names in d.get("outside_caps", {}).items():
            self.outside_caps[k] += [n for n in names if n not in self.outside_caps[k]]
        self.cannot_interpret = self.cannot_interpret or d.get("cannot_interpret", "")

    def compiling(self) -> "Compiling | None":
        """What the target spent compiling, when its calls say it compiles on first use: first calls
        at a new signature (N, dtypes, strides, eps) that take at least SLOW_FIRST_CALL_S and 10 times
        the median later call, 3 of them or more, and at least a fifth of the first calls. Never under
        Triton's interpreter, which compiles nothing: its first calls at a new signature are slow for
        their size (a row costs milliseconds), and the draw must not keep to signatures seen before."""
        if self.interpreted or len(self.later_calls) < 3 or len(self.first_calls) < 3:
            return None
        typical = statistics.median(self.later_calls)
        slow = [(n, t) for n, t in self.first_calls if t >= SLOW_FIRST_CALL_S and t >= 10 * typical]
        if len(slow) < 3 or len(slow) * 5 < len(self.first_calls):
            return None
        return Compiling(seconds=sum(t - typical for _, t in slow), calls=len(slow),
                         lengths=len({n for n, _ in slow}), typical=typical)

    def interpreted_line(self) -> str | None:
        """What the calls cost under Triton's interpreter (interpreted, not compiled), or None."""
        if not self.interpreted:
            return None
        every = [t for _, t in self.first_calls] + self.later_calls
        if not every:
            return "interpreted: no call timed (nothing compiled: Triton's interpreter runs each kernel's Python)"
        return (f"interpreted: {len(every)} calls timed, median {statistics.median(every) * 1e3:.1f} ms a call, the "
                f"slowest {max(every):.2f} s (nothing compiled: Triton's interpreter runs each kernel's Python, its "
                "programs one after another)")


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


def unfinished_failures(t: "Tally") -> list[dict]:
    """The laws that had failed when the run stopped, their shrinking not ended (no final case of
    theirs recorded): each with its first failing case, saved unshrunk."""
    final = {f["law"] for f in t.failures}
    return [f for law, f in sorted(t.unfinished.items()) if law not in final]
