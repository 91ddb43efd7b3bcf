"""pytest integration: options, the lane header, pre-building the target, and the summary of
what was checked, rejected and not run."""

from __future__ import annotations

import os
from collections import Counter
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from . import profiles  # noqa: F401  (registers the Hypothesis profiles the options name)
from .locations import command
from . import session as _state


def pytest_addoption(parser):
    g = parser.getgroup("rmsnorm", "RMSNorm gate (the laws of harness/properties)")
    g.addoption("--rmsnorm-target", default=None,
                help="target to judge: 'project' (default), source files/folders separated by commas, or module:NAME "
                     "(env RMSNORM_TARGET); given in a repository of its own, pytest also runs the laws on it")
    g.addoption("--rmsnorm-device", default=None, choices=("cpu", "cuda"),
                help="device to run the target on (env RMSNORM_DEVICE; default: cuda when a GPU is visible)")
    g.addoption("--rmsnorm-corpus", default=None,
                help="folder of saved failing cases (env RMSNORM_CORPUS; default: corpus/)")
    g.addoption("--rmsnorm-lenient", action="store_true",
                help="allow the target to reject in-contract inputs (default for targets other than 'project')")
    g.addoption("--rmsnorm-report", default=None,
                help="write what the run checked as JSON here: per law, per category, failures, accuracy, laws not run")


def _is_xdist_worker(config) -> bool:
    return hasattr(config, "workerinput")


def _laws_in(args) -> bool:
    from .locations import properties_dir

    props = properties_dir().resolve()
    for a in args:
        path = Path(str(a).split("::")[0])
        try:
            if path.resolve() == props or props in path.resolve().parents:
                return True
        except OSError:
            continue
    return False


def pytest_load_initial_conftests(early_config, parser, args):
    """In a repository of its own, `pytest --rmsnorm-target=...` runs the laws on that target too,
    beside the tests it would have run (the current folder when no path is given)."""
    # The paths pytest parsed (an option's value, "-p no:cacheprovider" say, is not a path).
    paths = list(getattr(early_config.known_args_namespace, "file_or_dir", None) or [])
    if any(a.startswith("--rmsnorm-target") for a in args) and not _laws_in(paths):
        from .locations import properties_dir

        if not paths:
            args.append(".")
        args.append(str(properties_dir()))


def _active(config) -> bool:
    """Whether this run judges a target: it runs the laws (or was asked to). In other projects'
    pytest runs the plugin, installed for every run, stays silent."""
    return bool(config.getoption("--rmsnorm-target")) or _laws_in(config.args)


def pytest_configure(config):
    opt = config.getoption
    if opt("--rmsnorm-target"):
        os.environ["RMSNORM_TARGET"] = opt("--rmsnorm-target")
    if opt("--rmsnorm-device"):
        os.environ["RMSNORM_DEVICE"] = opt("--rmsnorm-device")
    if opt("--rmsnorm-corpus"):
        os.environ["RMSNORM_CORPUS"] = str(Path(opt("--rmsnorm-corpus")).resolve())
    if opt("--rmsnorm-lenient"):
        os.environ["RMSNORM_STRICT"] = "0"
    config._rmsnorm_active = _active(config)
    if not _is_xdist_worker(config):
        RECORDED.clear()
        _RECORDING["on"] = config._rmsnorm_active
    if config._rmsnorm_active:
        from .locations import keep_caches_out_of_tmp

        keep_caches_out_of_tmp()
    if config._rmsnorm_active and not _is_xdist_worker(config) and not os.environ.get("RMSNORM_TALLY_DIR"):
        # The xdist workers write their tallies here; removed when the run ends (pytest_unconfigure).
        config._rmsnorm_tally_dir = tempfile.mkdtemp(prefix="rmsnorm-tally-")
        os.environ["RMSNORM_TALLY_DIR"] = config._rmsnorm_tally_dir
    if config._rmsnorm_active and not _is_xdist_worker(config) and getattr(config.option, "dist", "no") == "no":
        from .worker import start_cpu_fork_server

        # On the CPU, the workers' fork server forked from this process, which runs the laws itself
        # (an xdist controller does not: its workers have threads, and start their own).
        start_cpu_fork_server()


# What the laws' tests recorded in this run, in the process that reports it (the xdist controller
# gets every worker's reports): the gate's verdict comes from these, not from how pytest stopped
# (with -x under -n, xdist ends a failing run as "interrupted").
RECORDED: Counter = Counter()
_RECORDING = {"on": False}


def pytest_runtest_logreport(report):
    if not _RECORDING["on"]:
        return
    if report.failed and "crashed while running" in str(report.longrepr):
        RECORDED["worker_down"] += 1  # an xdist worker lost: a failure unless a signal took it down
    elif report.failed:
        RECORDED["failed"] += 1


def pytest_unconfigure(config):
    d = getattr(config, "_rmsnorm_tally_dir", None)
    if d:
        import shutil

        shutil.rmtree(d, ignore_errors=True)
        if os.environ.get("RMSNORM_TALLY_DIR") == d:
            del os.environ["RMSNORM_TALLY_DIR"]


def pytest_report_header(config):
    if not getattr(config, "_rmsnorm_active", False):
        return []
    try:
        spec = _state.target_spec()
        dev = _state.device()
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    import torch

    gpu = f", {torch.cuda.get_device_name()}" if dev == "cuda" else ""
    return [f"rmsnorm: lane {_state.lane()} (device {dev}{gpu}); target {spec}; torch {torch.__version__}"]


# Files in the order a failure is easiest to read: forward before backward before the rest.
_MODULE_ORDER = ("test_forward", "test_backward", "test_errors", "test_laws", "test_ops")


def pytest_collection_modifyitems(session, config, items):
    def rank(item):
        path = Path(str(item.fspath))
        if path.parent.name != "properties" or path.stem not in _MODULE_ORDER:
            return len(_MODULE_ORDER)
        return _MODULE_ORDER.index(path.stem)

    items.sort(key=rank)  # stable: tests keep their order within a file


def _law_of_item(item) -> str | None:
    """The law a test of harness/properties checks (test_backward_matches_reference_tall: backward_matches_reference)."""
    from .locations import properties_dir

    if Path(str(item.fspath)).resolve().parent != properties_dir().resolve():
        return None
    name = item.name.split("[")[0]
    name = name[len("test_"):] if name.startswith("test_") else name
    for suffix in ("_large", "_tall"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def pytest_runtest_setup(item):
    """A law that does not apply to the target here (CUDA-only on the CPU, an optional law not
    required) is skipped before Hypothesis runs it: its saved cases, replayed as explicit examples,
    would otherwise each report the skip as a "falsifying explicit example"."""
    if not getattr(item.config, "_rmsnorm_active", False):
        return
    law = _law_of_item(item)
    from .laws import LAWS

    if law in LAWS:
        _state._require(law, _state.runner().info)


def pytest_sessionstart(session: pytest.Session):
    config = session.config
    if _is_xdist_worker(config) or config.option.collectonly or not getattr(config, "_rmsnorm_active", False):
        return
    spec = _state.target_spec()
    from .target import is_prebuilt

    if is_prebuilt(spec) or os.environ.get("RMSNORM_BUILT") == spec:
        return
    # Build once here, with the compiler's progress visible, so workers load from the cache.
    tr = config.pluginmanager.get_plugin("terminalreporter")
    proc = subprocess.Popen([sys.executable, "-m", "harness", "build", "--target", spec, "--device", _state.device()],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if tr is not None and (line.startswith("rmsnorm:") or "error" in line.lower()):
            tr.write_line(line.rstrip())
    if proc.wait() != 0:
        raise pytest.UsageError(f"building target {spec} failed:\n{''.join(lines[-60:])}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A law's failure is reported as the gate's own block (case, diagnosis, saved file,
    replay command), without the harness's source or Hypothesis' notes; -v shows them all."""
    outcome = yield
    rep = outcome.get_result()
    if (rep.when == "call" and rep.failed and call.excinfo is not None
            and isinstance(call.excinfo.value, _state.GateFailure) and item.config.getoption("verbose") < 1):
        rep.longrepr = f"{item.nodeid.split('::')[-1]}: {call.excinfo.value.args[0]}"
        # Hypothesis would offer a patch that writes this target's failing case into this
        # project's test files; the corpus keeps it instead.
        item.__dict__.pop("_hypothesis_failing_examples", None)


FUZZ_DRIVER = "RMSNORM_FUZZ_DRIVER"  # set by harness.fuzz, which keeps the tally and reports itself


def pytest_sessionfinish(session: pytest.Session, exitstatus):
    if os.environ.get(FUZZ_DRIVER) or not getattr(session.config, "_rmsnorm_active", False):
        return
    if not _is_xdist_worker(session.config):
        from . import interrupts

        interrupts.acknowledge()  # the run is over: what follows is its report, which a signal must not cut
    d = os.environ.get("RMSNORM_TALLY_DIR")
    if d and _state.TALLY.by_law:
        _state.write_tally(Path(d))
    if _is_xdist_worker(session.config):
        return
    t = collect_tally()
    checked = sum(c["pass"] + c["fail"] + c["crash"] + c["hang"] for c in t.by_law.values())
    if t.by_law and checked == 0:  # a target that rejects everything must not look green
        session.config._rmsnorm_nothing_checked = True
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if too_few_checked(t) or t.contradicted:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    reasons = ([f"{len(too_few_checked(t))} law(s) checked too few cases"] if too_few_checked(t) else []) + \
              (["a class of refusals was contradicted by an accepted case"] if t.contradicted else []) + \
              (["the target rejected every case"] if t.by_law and checked == 0 else [])
    COVERAGE_VERDICT.clear()
    COVERAGE_VERDICT.extend(reasons)  # what the command's verdict line says, when no test failed
    NOT_RUN_HERE[:] = sorted(t.no_room)  # laws this GPU had too little free memory for: the verdict line names them
    RECORDED["unfinished"] = len(_state.unfinished_failures(t))  # failed, though stopped before its test ended
    if exitstatus == pytest.ExitCode.INTERNAL_ERROR and not SUMMARY_WRITTEN:
        # pytest writes no summary after an error of its own (above): the report from what the workers recorded.
        SUMMARY_WRITTEN.append(True)
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        write = tr.write_line if tr is not None else print
        write("rmsnorm gate: pytest stopped with an internal error (above); the report from what the workers recorded:")
        for line in summary_lines(t, []):
            write(line)


COVERAGE_VERDICT: list[str] = []  # set at the end of a run: why it failed on coverage, if it did
NOT_RUN_HERE: list[str] = []  # set at the end of a run: laws stopped at a case too big for this GPU's free memory
# Set once the report is written: pytest skips its summary after an internal error (xdist's controller once
# asserted on a worker that a SIGTERM stopped mid-test), and the gate then writes the report itself.
SUMMARY_WRITTEN: list[bool] = []


def coverage_floor() -> int:
    """Cases a law must check (not refused, not skipped): RMSNORM_MIN_CHECKED, else 20 under the
    gate and ci profiles (40 drawn a law), 5 under dev (20 drawn) and none under fuzz (whose
    report lists the laws that never ran)."""
    v = os.environ.get("RMSNORM_MIN_CHECKED")
    if v:
        if not v.isdigit():
            raise ValueError(f"RMSNORM_MIN_CHECKED: expected a whole number, but got {v!r}")
        return int(v)
    from hypothesis import settings

    name = settings.get_current_profile_name()
    return {"gate": 20, "ci": 20, "dev": 5}.get(name, 0)


def too_few_checked(t) -> list[tuple[str, int, int, int]]:
    """(law, checked, drawn, needed) for each law under the floor; a law with a small budget of
    its own needs half of what it drew."""
    floor = coverage_floor()
    out = []
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


def collect_tally() -> "_state.Tally":
    d = os.environ.get("RMSNORM_TALLY_DIR")
    t = _state.Tally.read(Path(d)) if d else _state.Tally()
    _state.adopt_contract(t.contract)
    return t


def summary_lines(t: "_state.Tally", skipped: list[tuple[str, str]]) -> list[str]:
    lines = [f"lane: {_state.lane()} — target {_state.target_spec()} on {_state.device()}"]
    from .target import is_prebuilt

    if not is_prebuilt(_state.target_spec()):
        from . import toolchain

        verdict = toolchain.cached()
        if verdict is not None:
            lines.append(verdict.line())
    if _state.lane() == "CPU":
        lines.append("not run in this lane: the CUDA kernels, CUDA-only laws (current stream, CUDA graphs) and "
                     "compute-sanitizer; run the suite on a GPU for those")
    try:
        lines.append(_state.contract().describe())
    except Exception:  # noqa: BLE001 - the target did not load: the set-up error says why
        pass
    if skipped:
        lines.append("not run: " + "; ".join(f"{n} ({why})" for n, why in skipped))
    if t.by_law:
        lines.append(f"{'law':34} {'cases':>7} {'passed':>7} {'rejected':>9} {'failed':>7} {'seconds':>8}")
        for law in sorted(t.by_law):
            c = t.by_law[law]
            total = sum(c.values())
            bad = c["fail"] + c["crash"] + c["hang"]
            lines.append(f"{law:34} {total:7d} {c['pass']:7d} {c['rejected']:9d} {bad:7d} {t.seconds[law]:8.1f}")
    from .story import shared

    lines += shared(t.failures)  # one bug, one story: what the failing cases have in common
    for f in _state.unfinished_failures(t):
        lines.append(f"FAILED {f['law']} [{f['status']}], stopped while shrinking: {f['message']}; its first failing "
                     f"case (not shrunk) is saved: {f['file']}; replay: {command()} replay {f['file']}")
    if t.refusals and not t.classes:  # with classes inferred, their lines below say it all
        from collections import Counter as _Counter

        causes = _Counter(cause for cause, _, _ in t.refusals)
        lines.append(f"refused by the target ({len(t.refusals)} case(s), not checked; each explained by a class of "
                     "inputs, or a weight that is not contiguous where a declared contract names no weight layouts):")
        lines += [f"  {k} refused with \"{cause}\"" for cause, k in causes.most_common(8)]
    from .refusals import report_lines

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
    if t.unverified_rows:
        lines.append(f"rows not compared: {t.unverified_rows} (their statistics leave the accumulation type's "
                     "range: the sum of squares overflowing or in its subnormal range, or, for grad_x, inv_rms^3 "
                     "overflowing; there the right answer depends on the implementation)")
    if t.worker["restarts"] or t.worker["kept"]:
        from .worker import start_method

        line = (f"worker: {t.worker['restarts']} restart(s) after crashes or hangs (start method "
                f"{start_method()})")
        if _state.lane() == "CUDA":
            line += f"; carried on after {t.worker['kept']} CUDA error(s) that left the context usable"
        lines.append(line)
    return lines


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if os.environ.get(FUZZ_DRIVER) or not getattr(config, "_rmsnorm_active", False):
        return
    if _is_xdist_worker(config):
        return
    SUMMARY_WRITTEN.append(True)
    t = collect_tally()
    skipped = []
    for rep in terminalreporter.stats.get("skipped", []):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        skipped.append((rep.nodeid.split("::")[-1], reason.replace("Skipped: ", "")))
    terminalreporter.section("rmsnorm gate")
    for line in summary_lines(t, skipped):
        terminalreporter.write_line(line)
    if getattr(config, "_rmsnorm_nothing_checked", False):
        terminalreporter.write_line("FAIL: the target rejected every case; nothing was checked", red=True)
    if config.getoption("--rmsnorm-report"):
        import json

        try:
            import dataclasses

            c = _state.contract()
            contract = {**dataclasses.asdict(c), "declared": c.declared}
        except Exception as e:  # noqa: BLE001  (a target that no longer loads: the report still lands)
            contract = {"error": str(e).splitlines()[0] if str(e) else type(e).__name__}
        doc = {"target": _state.target_spec(), "device": _state.device(), "lane": _state.lane(), "contract": contract,
               "exitstatus": int(exitstatus), "coverage": list(COVERAGE_VERDICT),
               "not_run": [{"test": name, "why": why} for name, why in skipped], "tally": t.to_json()}
        path = Path(config.getoption("--rmsnorm-report"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1, default=str))
