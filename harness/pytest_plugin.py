"""pytest integration: options, the lane header, pre-building the target, and the summary of
what was checked, rejected and not run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.running.locations import keep_caches_out_of_tmp, properties_dir, work_root
from harness.running.spec import TargetSpec
from harness.running.worker import start_cpu_fork_server
import dataclasses

# pip registers this plugin for every pytest run of the environment it is installed in, and the gate's own
# dependencies (Hypothesis above all) come with its extra: what needs them is imported once the plugin is
# active, in the hooks below, and the profiles only where Hypothesis is there.
try:
    from harness.running import hypothesis_profiles  # noqa: F401  (registers the profiles --hypothesis-profile names)
except ImportError:  # Hypothesis is not installed: this environment does not run the gate
    hypothesis_profiles = None


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
                help="allow the target to reject in-contract inputs, and a y as wide as promotion with the weight "
                     "gives (gradients: any wider float) (default for targets other than 'project')")
    g.addoption("--rmsnorm-report", default=None,
                help="write what the run checked as JSON here: per law, per category, failures, accuracy, laws not run")


def _gate() -> SimpleNamespace:
    """The gate's own modules, imported once the plugin is active: they import Hypothesis and torch, which
    belong to the gate, not to every test suite this plugin is installed beside."""
    import torch

    from harness.judging.laws import LAWS
    from harness.running import interrupts, report, session, tally

    return SimpleNamespace(torch=torch, LAWS=LAWS, interrupts=interrupts, report=report, session=session,
                           tally=tally)


def _is_xdist_worker(config) -> bool:
    return hasattr(config, "workerinput")


def _laws_in(args) -> bool:
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
        keep_caches_out_of_tmp()
        if hypothesis_profiles is not None:
            # Hypothesis' own folder (its database, its notes) in the gate's work folder, never in the folder the
            # gate is run from (a kernel author's repository).
            from hypothesis.configuration import set_hypothesis_home_dir

            set_hypothesis_home_dir(str(work_root() / "hypothesis"))
    if config._rmsnorm_active and not _is_xdist_worker(config) and not os.environ.get("RMSNORM_TALLY_DIR"):
        # The xdist workers write their tallies here; removed when the run ends (pytest_unconfigure).
        config._rmsnorm_tally_dir = tempfile.mkdtemp(prefix="rmsnorm-tally-")
        os.environ["RMSNORM_TALLY_DIR"] = config._rmsnorm_tally_dir
    if config._rmsnorm_active and not _is_xdist_worker(config) and getattr(config.option, "dist", "no") == "no":
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
        shutil.rmtree(d, ignore_errors=True)
        if os.environ.get("RMSNORM_TALLY_DIR") == d:
            del os.environ["RMSNORM_TALLY_DIR"]


def pytest_report_header(config):
    if not getattr(config, "_rmsnorm_active", False):
        return []
    g = _gate()
    try:
        spec = TargetSpec.from_env()
        dev = g.session.device()
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    gpu = f", {g.torch.cuda.get_device_name()}" if dev == "cuda" else ""
    return [f"rmsnorm: lane {g.session.lane()} (device {dev}{gpu}); target {spec}; torch {g.torch.__version__}"]


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
    g = _gate()
    law = _law_of_item(item)
    if law in g.LAWS:
        g.session.current().require(law)


def pytest_sessionstart(session: pytest.Session):
    config = session.config
    if _is_xdist_worker(config) or config.option.collectonly or not getattr(config, "_rmsnorm_active", False):
        return
    spec = TargetSpec.from_env()
    if spec.prebuilt or os.environ.get("RMSNORM_BUILT") == str(spec):
        return
    # Build once here, with the compiler's progress visible, so workers load from the cache.
    tr = config.pluginmanager.get_plugin("terminalreporter")
    proc = subprocess.Popen([sys.executable, "-m", "harness", "build", "--target", str(spec), "--device",
                             _gate().session.device()],
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
    """A law's failure is reported as the gate's own block (case, diagnosis, saved file, replay command),
    Hypothesis' own outcomes (a failure that did not reproduce, several distinct failures, a health check)
    translated, without the harness's source or Hypothesis' notes; -v shows them all."""
    outcome = yield
    rep = outcome.get_result()
    if not getattr(item.config, "_rmsnorm_active", False) or rep.when != "call" or not rep.failed:
        return
    if call.excinfo is None or _law_of_item(item) is None:
        return
    # Hypothesis would offer a patch that writes the target's failing case into the gate's own test files;
    # the corpus keeps it instead.
    item.__dict__.pop("_hypothesis_failing_examples", None)
    if item.config.getoption("verbose") < 1:
        text = _gate().report.translate(item.nodeid.split("::")[-1], _law_of_item(item), call.excinfo.value)
        if text is not None:
            rep.longrepr = text


FUZZ_DRIVER = "RMSNORM_FUZZ_DRIVER"  # set by harness.commands.fuzz, which keeps the tally and reports itself


def pytest_sessionfinish(session: pytest.Session, exitstatus):
    if os.environ.get(FUZZ_DRIVER) or not getattr(session.config, "_rmsnorm_active", False):
        return
    g = _gate()
    if not _is_xdist_worker(session.config):
        g.interrupts.acknowledge()  # the run is over: what follows is its report, which a signal must not cut
    d = os.environ.get("RMSNORM_TALLY_DIR")
    if d and g.session.current().tally.by_law:
        g.session.current().write_tally(Path(d))
    if _is_xdist_worker(session.config):
        return
    t = g.report.collect_tally()
    checked = sum(c["pass"] + c["fail"] + c["crash"] + c["hang"] for c in t.by_law.values())
    if t.by_law and checked == 0:  # a target that rejects everything must not look green
        session.config._rmsnorm_nothing_checked = True
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if g.report.too_few_checked(t) or t.contradicted:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    reasons = ([f"{len(g.report.too_few_checked(t))} law(s) checked too few cases"] if g.report.too_few_checked(t) else []) + \
              (["a class of refusals was contradicted by an accepted case"] if t.contradicted else []) + \
              (["the target rejected every case"] if t.by_law and checked == 0 else [])
    COVERAGE_VERDICT.clear()
    COVERAGE_VERDICT.extend(reasons)  # what the command's verdict line says, when no test failed
    NOT_RUN_HERE[:] = sorted(t.no_room)  # laws this GPU had too little free memory for: the verdict line names them
    RECORDED["unfinished"] = len(g.tally.unfinished_failures(t))  # failed, though stopped before its test ended
    if exitstatus == pytest.ExitCode.INTERNAL_ERROR and not SUMMARY_WRITTEN:
        # pytest writes no summary after an error of its own (above): the report from what the workers recorded.
        SUMMARY_WRITTEN.append(True)
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        write = tr.write_line if tr is not None else print
        write("rmsnorm gate: pytest stopped with an internal error (above); the report from what the workers recorded:")
        for line in g.report.summary_lines(t, []):
            write(line)


COVERAGE_VERDICT: list[str] = []  # set at the end of a run: why it failed on coverage, if it did
NOT_RUN_HERE: list[str] = []  # set at the end of a run: laws stopped at a case too big for this GPU's free memory
# Set once the report is written: pytest skips its summary after an internal error (xdist's controller once
# asserted on a worker that a SIGTERM stopped mid-test), and the gate then writes the report itself.
SUMMARY_WRITTEN: list[bool] = []


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if os.environ.get(FUZZ_DRIVER) or not getattr(config, "_rmsnorm_active", False):
        return
    if _is_xdist_worker(config):
        return
    g = _gate()
    SUMMARY_WRITTEN.append(True)
    t = g.report.collect_tally()
    skipped = []
    for rep in terminalreporter.stats.get("skipped", []):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        skipped.append((rep.nodeid.split("::")[-1], reason.replace("Skipped: ", "")))
    terminalreporter.section("rmsnorm gate")
    for line in g.report.summary_lines(t, skipped):
        terminalreporter.write_line(line)
    if getattr(config, "_rmsnorm_nothing_checked", False):
        terminalreporter.write_line("FAIL: the target rejected every case; nothing was checked", red=True)
    if config.getoption("--rmsnorm-report"):
        try:
            c = g.session.current().contract()
            contract = {**dataclasses.asdict(c), "declared": c.declared}
        except Exception as e:  # noqa: BLE001  (a target that no longer loads: the report still lands)
            contract = {"error": str(e).splitlines()[0] if str(e) else type(e).__name__}
        doc = {"target": str(g.session.current().spec), "device": g.session.device(), "lane": g.session.lane(), "contract": contract,
               "exitstatus": int(exitstatus), "coverage": list(COVERAGE_VERDICT),
               "not_run": [{"test": name, "why": why} for name, why in skipped], "tally": t.to_json()}
        path = Path(config.getoption("--rmsnorm-report"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1, default=str))
