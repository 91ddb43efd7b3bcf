"""The report of a run, from what its processes recorded (harness.running.tally): one line per law, the
failures and what they share, the refusals and the contract they came to, what was not run and why, and
the coverage floor every law that applies must reach before a run may pass."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

from hypothesis import settings
from hypothesis.errors import DeadlineExceeded, FailedHealthCheck, FlakyFailure, FlakyStrategyDefinition

from harness.judging.refusals import report_lines
from harness.judging.story import shared
from harness.running import interrupts, session as _state
from harness.running.locations import command
from harness.running.spec import TargetSpec
from harness.running.tally import Tally, unfinished_failures
from harness.running.worker import start_method
from rmsnorm import _toolchain as toolchain


def coverage_floor() -> int:
    """Cases a law must check (not refused, not skipped): RMSNORM_MIN_CHECKED, else 20 under the
    gate and ci profiles (40 drawn a law), 5 under dev (20 drawn) and none under fuzz (whose
    report lists the laws that never ran)."""
    v = os.environ.get("RMSNORM_MIN_CHECKED")
    if v:
        if not v.isdigit():
            raise ValueError(f"RMSNORM_MIN_CHECKED: expected a whole number, but got {v!r}")
        return int(v)
    name = settings.get_current_profile_name()
    return {"gate": 20, "ci": 20, "dev": 5}.get(name, 0)


def too_few_checked(t) -> list[tuple[str, int, int, int]]:
    """(law, checked, drawn, needed) for each law under the floor; a law with a small budget of
    its own needs half of what it drew."""
    floor = coverage_floor()
    out = []
    if t.cannot_interpret:  # not judged at all: neither passed nor failed, on coverage or otherwise
        return out
    for law in sorted(set(t.by_law) | set(t.cut_short) | set(t.applies)):
        if law in t.no_room:  # not run on this GPU: said on a line of its own, neither passed nor failed
            continue
        if law in nothing_inside(t):  # the contract leaves it nothing to draw: not applicable, said apart
            continue
        c = t.by_law.get(law, {})
        total = sum(c.values())
        checked = c.get("pass", 0) + c.get("fail", 0) + c.get("crash", 0) + c.get("hang", 0)
        # A law the budget cut short must have checked the floor itself before it ran out, and a law
        # that applies here but judged nothing (every case it reached was outside the contract, or
        # its test ended early for any reason) fails: a gate cannot pass what it did not check.
        need = floor if law in t.cut_short or total == 0 else min(floor, -(-total // 2))
        if checked < need:
            out.append((law, checked, total, need))
    return out


def nothing_inside(t) -> list[str]:
    """Laws every case of which lay outside the contract (declared or inferred): the contract leaves
    them nothing to draw, so they are not applicable, whatever the coverage floor."""
    return sorted(law for law in t.outside_contract
                  if law not in t.cut_short and not sum(t.by_law.get(law, {}).values()))


def stopped_early() -> bool:
    """Whether a signal or the wall-time budget stopped the run (what may leave a failure unshrunk)."""
    end = _state.deadline()
    return interrupts.received() or (end is not None and time.time() > end)


def translate(test: str, law: str, exc: BaseException) -> str | None:
    """A law's failure as the report tells it: the gate's own block, and Hypothesis' outcomes in its words (a
    failure that did not reproduce when run again, several distinct failures, a health check, a deadline);
    None for anything else (pytest's own report stands)."""
    gate = _state.GateFailure
    if isinstance(exc, gate):
        return f"{test}: {exc.args[0]}"
    inner = [e for e in getattr(exc, "exceptions", ()) if isinstance(e, gate)]
    if isinstance(exc, FlakyFailure):
        unfinished = _state.current().tally.unfinished.get(law)
        if unfinished is not None:
            unfinished["nondeterministic"] = True
        if unfinished:  # the case that is saved: the first that failed (a later one may be another shape)
            first = (f"[{unfinished['status']}] {unfinished['message']}\n  case: {unfinished.get('case', '?')}"
                     f"\n  saved: {unfinished['file']}\n  replay: {command()} replay {unfinished['file']}")
        elif inner:
            first = inner[0].args[0]
        else:  # not the gate's own failure (the harness's error, say): what was raised, not Hypothesis' words
            raised = [e for e in getattr(exc, "exceptions", ())][:2]
            first = "; ".join(f"{type(e).__name__}: {' '.join(str(e).strip().splitlines()[:2])[:300]}"
                              for e in raised) or str(exc).splitlines()[0]
        return (f"{test}: [nondeterministic] the case failed, then passed when run again: a failure that comes and "
                f"goes (memory read before anything wrote it, a race, state kept between calls)\n  {first}")
    if inner:  # an exception group (Python's, or its backport): several distinct failures
        return (f"{test}: {len(inner)} distinct failures\n" +
                "\n".join(f"  ({k}) {e.args[0]}" for k, e in enumerate(inner, 1)))
    if isinstance(exc, FailedHealthCheck):
        return (f"{test}: Hypothesis' health check failed on this law's strategy (the gate's fault, not the "
                f"target's: please report it): {str(exc).strip().splitlines()[0]}")
    if isinstance(exc, FlakyStrategyDefinition):
        return (f"{test}: the gate's strategy drew differently when Hypothesis replayed a case (the gate's fault: "
                f"please report it): {str(exc).strip().splitlines()[0]}")
    if isinstance(exc, DeadlineExceeded):
        return f"{test}: a case ran past Hypothesis' deadline: {str(exc).strip().splitlines()[0]}"
    return None


def interpreter_lines(t: Tally) -> list[str]:
    """What a run under Triton's interpreter was: where the setting was made and with which shims, the
    hang limit from the measured speed, the caps it drew under, and what it could not judge."""
    from harness.judging.caps import INTERPRETER
    from harness.running.interpreter import SHIMS, describe_limit  # Triton's: only for an interpreted target

    lines = ["Triton interpreter: TRITON_INTERPRET=1 in the target's worker processes only, with two shims ("
             + "; ".join(SHIMS) + "); " + describe_limit((t.interpreter or {}).get("speed")),
             INTERPRETER.describe()]
    if t.outside_caps:
        n = sum(len(v) for v in t.outside_caps.values())
        lines.append(f"saved cases past the interpreter's caps, not run: {n}: " + "; ".join(
            f"{law} {len(v)} ({', '.join(v[:2])}{', ...' if len(v) > 2 else ''})"
            for law, v in sorted(t.outside_caps.items())))
    for dtype, why in sorted(t.not_judged_why.items()):
        cases = sum(c.get("not_judged", 0) for c in t.by_law.values())
        lines.append(f"NOT JUDGED under the interpreter: {dtype}, drawn no more in this run ({cases} case(s) of it "
                     f"met, neither passed nor failed): {why}")
    if t.cannot_interpret:
        lines.append(f"NOT JUDGED: Triton's interpreter could not run the target's kernel: {t.cannot_interpret}; the "
                     "target is neither failed nor passed")
    return lines


def collect_tally() -> Tally:
    d = os.environ.get("RMSNORM_TALLY_DIR")
    t = Tally.read(Path(d)) if d else Tally()
    _state.current().adopt_contract(t.contract)
    return t


def summary_lines(t: Tally, skipped: list[tuple[str, str]]) -> list[str]:
    spec = TargetSpec.from_env()
    lines = [f"lane: {_state.lane_label()} — target {spec} on {_state.device()}"]
    if not spec.prebuilt:
        verdict = toolchain.cached()
        if verdict is not None:
            lines.append(verdict.line())
    if _state.lane() == "CPU":
        lines.append("not run in this lane: the CUDA kernels, CUDA-only laws (current stream, CUDA graphs) and "
                     "compute-sanitizer; run the suite on a GPU for those")
    try:
        lines.append(_state.current().contract(judged_only=False).describe())
    except Exception:  # noqa: BLE001 - the target did not load: the set-up error says why
        pass
    if t.grads_by_autograd:
        lines.append("backward: the target has none of the card's form; its gradients are judged through "
                     "torch.autograd.grad of its forward, as a model trains through it")
    if spec.interpreted(_state.device()):
        lines += interpreter_lines(t)
    if skipped:
        by_why: dict[str, list[str]] = {}
        for name, why in skipped:  # "law: why" (the law's own name before the colon)
            by_why.setdefault(why.split(": ", 1)[1] if ": " in why else why, []).append(name)
        lines.append("not run: " + "; ".join(f"{', '.join(names)} ({why})" for why, names in by_why.items()))
    if t.by_law:
        lines.append(f"{'law':34} {'cases':>7} {'passed':>7} {'rejected':>9} {'failed':>7} {'seconds':>8}")
        for law in sorted(t.by_law):
            c = t.by_law[law]
            total = sum(c.values())
            bad = c["fail"] + c["crash"] + c["hang"]
            lines.append(f"{law:34} {total:7d} {c['pass']:7d} {c['rejected']:9d} {bad:7d} {t.seconds[law]:8.1f}")
    lines += shared(t.failures)  # one bug, one story: what the failing cases have in common
    stopped = stopped_early()
    for f in unfinished_failures(t):
        how = ("stopped while shrinking" if stopped and not f.get("nondeterministic") else
               "nondeterministic (it failed, then passed when run again: memory read before anything wrote it, a "
               "race, or state kept between calls)")
        lines.append(f"FAILED {f['law']} [{f['status']}], {how}: {f['message']}; its failing case (not shrunk) is "
                     f"saved: {f['file']}; replay: {command()} replay {f['file']}")
    if t.refusals and not t.classes:  # with classes inferred, their lines below say it all
        causes = Counter(cause for cause, _, _ in t.refusals)
        lines.append(f"refused by the target ({len(t.refusals)} case(s), not checked; each explained by a class of "
                     "inputs, or a weight that is not contiguous where a declared contract names no weight layouts):")
        lines += [f"  {k} refused with \"{cause}\"" for cause, k in causes.most_common(8)]
    lines += report_lines(t.classes, t.contradicted)
    for law in nothing_inside(t):
        lines.append(f"not applicable: {law} (every case it drew lies outside the contract, which leaves it nothing "
                     "to draw)")
    if t.outside_contract:
        n = sum(len(v) for v in t.outside_contract.values())
        lines.append(f"saved cases outside the declared contract, not applicable (not judged; each law drew its own): "
                     f"{n}: " + "; ".join(f"{law} {len(v)} ({', '.join(v[:2])}{', ...' if len(v) > 2 else ''})"
                                          for law, v in sorted(t.outside_contract.items())))
    for law, why in sorted(t.no_room.items()):
        c = t.by_law.get(law, {})
        lines.append(f"NOT RUN on this GPU: {law} stopped at a case that needs more GPU memory than was free, after "
                     f"{c.get('pass', 0)} case(s) passed ({why}); nothing it did not run counts as passed: run it "
                     "on a GPU with more free memory, alone")
    if t.cut_short:
        lines.append("cut short by the wall-time budget: " + ", ".join(sorted(t.cut_short))
                     + " (what they checked is judged; the rest was not drawn)")
    if t.shrink_cut:
        lines.append("shrinking cut short by the wall-time budget: " + ", ".join(sorted(t.shrink_cut))
                     + " (their failing cases are real, a smaller one may fail too: replay it, or rerun with a "
                     "larger --budget)")
    for law, checked, total, need in too_few_checked(t):
        if law in t.cut_short:
            lines.append(f"FAIL {law}: too few cases checked: {checked} before the wall-time budget ran out, "
                         f"{need} needed; give the gate a larger --budget")
        elif total == 0:
            lines.append(f"FAIL {law}: applies to this target but checked no case (its test ended before it drew "
                         f"one; see the not-run and outside-contract lines above); {need} needed")
        else:
            lines.append(f"FAIL {law}: too few cases checked: {checked} of {total} ({total - checked} refused), "
                         f"{need} needed; declare the target's contract (--dtypes ..., RMSNORM_CONTRACT) so "
                         "that cases are drawn inside it")
    compiling = t.compiling()
    if compiling is not None:
        lines.append(compiling.line())
    if t.interpreted_line():
        lines.append(t.interpreted_line())
    if t.unverified_rows:
        lines.append(f"rows not compared: {t.unverified_rows} (their statistics leave the accumulation type's "
                     "range: the sum of squares overflowing or in its subnormal range, or, for grad_x, inv_rms^3 "
                     "overflowing; there the right answer depends on the implementation)")
    if t.worker["restarts"] or t.worker["kept"]:
        line = (f"worker: {t.worker['restarts']} restart(s) after crashes or hangs (start method "
                f"{start_method()})")
        if _state.lane() == "CUDA":
            line += f"; carried on after {t.worker['kept']} CUDA error(s) that left the context usable"
        lines.append(line)
    return lines
