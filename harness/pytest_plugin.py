"""pytest integration: options, the lane header, pre-building the target, and the summary of
what was checked, rejected and not run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from . import session as _state


def pytest_addoption(parser):
    g = parser.getgroup("rmsnorm", "RMSNorm gate")
    g.addoption("--target", default=None,
                help="target to judge: 'project' (default), source files/folders separated by commas, or module:NAME "
                     "(env RMSNORM_TARGET)")
    g.addoption("--device", default=None, choices=("cpu", "cuda"),
                help="device to run the target on (env RMSNORM_DEVICE; default: cuda when a GPU is visible)")
    g.addoption("--corpus", default=None, help="folder of saved failing cases (env RMSNORM_CORPUS; default corpus/)")
    g.addoption("--lenient", action="store_true",
                help="allow the target to reject in-contract inputs (default for targets other than 'project')")


def _is_xdist_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config):
    opt = config.getoption
    if opt("--target"):
        os.environ["RMSNORM_TARGET"] = opt("--target")
    if opt("--device"):
        os.environ["RMSNORM_DEVICE"] = opt("--device")
    if opt("--corpus"):
        os.environ["RMSNORM_CORPUS"] = str(Path(opt("--corpus")).resolve())
    if opt("--lenient"):
        os.environ["RMSNORM_STRICT"] = "0"
    if not _is_xdist_worker(config) and not os.environ.get("RMSNORM_TALLY_DIR"):
        os.environ["RMSNORM_TALLY_DIR"] = tempfile.mkdtemp(prefix="rmsnorm-tally-")


def pytest_report_header(config):
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


def pytest_sessionstart(session: pytest.Session):
    config = session.config
    if _is_xdist_worker(config) or config.option.collectonly:
        return
    spec = _state.target_spec()
    from .target import is_prebuilt

    if is_prebuilt(spec):
        return
    # Build once here, with the compiler's progress visible, so workers load from the cache.
    tr = config.pluginmanager.get_plugin("terminalreporter")
    proc = subprocess.Popen([sys.executable, "-m", "harness", "build", "--target", spec], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if tr is not None and (line.startswith("rmsnorm:") or "error" in line.lower()):
            tr.write_line(line.rstrip())
    if proc.wait() != 0:
        raise pytest.UsageError(f"building target {spec} failed:\n{''.join(lines[-60:])}")


def pytest_sessionfinish(session: pytest.Session, exitstatus):
    d = os.environ.get("RMSNORM_TALLY_DIR")
    if d and _state.TALLY.by_law:
        _state.write_tally(Path(d))
    if _is_xdist_worker(session.config):
        return
    t = collect_tally()
    total = sum(sum(c.values()) for c in t.by_law.values())
    checked = sum(c["pass"] + c["fail"] + c["crash"] + c["hang"] for c in t.by_law.values())
    if total and checked == 0:  # a target that rejects everything must not look green
        session.config._rmsnorm_nothing_checked = True
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def collect_tally() -> "_state.Tally":
    t = _state.Tally()
    d = os.environ.get("RMSNORM_TALLY_DIR")
    if d and Path(d).is_dir():
        for p in sorted(Path(d).glob("tally-*.json")):
            t.merge(json.loads(p.read_text()))
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
    if skipped:
        lines.append("not run: " + "; ".join(f"{n} ({why})" for n, why in skipped))
    if t.by_law:
        lines.append(f"{'law':34} {'cases':>7} {'passed':>7} {'rejected':>9} {'failed':>7} {'seconds':>8}")
        for law in sorted(t.by_law):
            c = t.by_law[law]
            total = sum(c.values())
            bad = c["fail"] + c["crash"] + c["hang"]
            lines.append(f"{law:34} {total:7d} {c['pass']:7d} {c['rejected']:9d} {bad:7d} {t.seconds[law]:8.1f}")
    rej = []
    for cat, counts in sorted(t.rejected_by_cat.items()):
        for val, k in sorted(counts.items()):
            seen = t.seen_by_cat[cat][val]
            rej.append(f"{cat} {val}: rejected {100 * k / seen:.0f}% ({k} of {seen})")
    if rej:
        lines.append("rejected by the target (allowed, but not checked): " + "; ".join(rej))
        for msg in list(t.reject_examples.values())[:3]:
            lines.append(f"  e.g. {msg[:200]}")
    if t.unverified_rows:
        lines.append(f"rows outside the accumulation type's range, not compared: {t.unverified_rows}")
    if t.worker["restarts"] or t.worker["kept"]:
        from .worker import start_method

        line = (f"worker: {t.worker['restarts']} restart(s) after crashes or hangs (start method "
                f"{start_method()})")
        if _state.lane() == "CUDA":
            line += f"; carried on after {t.worker['kept']} CUDA error(s) that left the context usable"
        lines.append(line)
    return lines


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _is_xdist_worker(config):
        return
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
