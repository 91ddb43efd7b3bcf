"""``gate``: the pre-merge gate. Set-up checks first (the device, the build, the target's import), each a
one-line set-up error; then every law under pytest with a fixed seed and a wall-time budget, and one
verdict line derived from what the run recorded."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from harness import pytest_plugin
from harness.commands.exits import (EXIT_FAILED, EXIT_INTERRUPTED, EXIT_PASSED, EXIT_SETUP, EXIT_TERMINATED,
                                    NotJudgedError, SetupError)
from harness.commands.options import apply_target_env
from harness.running import interrupts, session
from harness.running.gpus import default_processes
from harness.running.heap import freeze_imported_objects
from harness.running.loading import default_device
from harness.running.locations import command, properties_dir, pytest_args as laws_pytest_args, work_root
from harness.running.provenance import provenance
from harness.running.report import stopped_early
from harness.running.spec import TargetSpec
from harness.running.tally import Tally
from harness.running.worker import HarnessError, start_cpu_fork_server
from rmsnorm import _toolchain
from rmsnorm._build import built_before


def preflight(what: str) -> None:
    """Set-up checks before any test runs: the device, the build, the target's import. Raises
    SetupError with one line; the build's whole output is kept in .build/setup-error.log."""
    spec, dev = TargetSpec.from_env(), session.device()
    if dev == "cuda" and not torch.cuda.is_available():
        raise SetupError(f"device cuda was asked for, but torch {torch.__version__} sees no GPU here"
                         + ("" if torch.version.cuda else " (a CPU-only build of torch)"))
    if not spec.prebuilt:
        ready = _built_before(spec)
        if ready:
            print(ready, flush=True)
        else:
            _build_in_a_process(spec, dev)
        os.environ["RMSNORM_BUILT"] = str(spec)  # pytest's session start need not build it again
    try:
        info = session.current().runner().info
    except HarnessError as e:
        interrupts.check()  # a worker the interrupt ended while it loaded the target: the interrupt's
        lines = [ln for ln in str(e).splitlines()[1:] if ln.strip()] or [str(e)]
        raise SetupError(f"target {spec} could not be loaded for {what}: {lines[0][:300]}") from None
    cannot = (info.get("interpreter") or {}).get("cannot_interpret")
    if cannot:  # its first calls under Triton's interpreter: the interpreter cannot run its kernel
        raise NotJudgedError(cannot)


def not_judged_line(cmd: str, spec: TargetSpec, why: str) -> str:
    """The verdict line of a target that Triton's interpreter cannot run (why: its error, and where)."""
    return (f"rmsnorm {cmd} NOT JUDGED: target {spec} cannot run under Triton's interpreter: {why}; neither failed "
            "nor passed (judge it compiled, on a GPU, or make the kernel run under the interpreter)")


def _build_in_a_process(spec: TargetSpec, device: str) -> None:
    """Build the target for device in a process of its own; SetupError with one line where it does
    not build."""
    p = subprocess.run([sys.executable, "-m", "harness", "build", "--target", str(spec), "--device", device],
                       capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("rmsnorm:") and "toolchain:" not in line:  # the report has the toolchain line
            print(line, flush=True)
    # Ctrl-C reaches the build too (one process group): a build it ended is the interrupt's, not a
    # failure to build (a gate interrupted while it loaded once said "does not build", exit 2).
    interrupts.check()
    if p.returncode != 0:
        log = work_root() / "setup-error.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(p.stdout + p.stderr)
        errors = [ln.strip() for ln in (p.stdout + p.stderr).splitlines()
                  if "error" in ln.lower() and not ln.startswith("W")]
        raise SetupError(f"target {spec} does not build: {(errors or ['see the log'])[-1][:300]} "
                         f"(whole output: {log})")


def _built_before(spec: TargetSpec) -> str | None:
    """The "ready" line of a build of this target that compiled and imported here before (same key:
    sources, headers, flags, torch), or None. The worker that loads it checks it is up to date (ninja)
    as every load does; a process started only to build it again cost about 2 s a run."""
    if spec.kind == "mutant":
        return None
    if _toolchain.cached() is None:  # the key holds the toolchain's flags: probed in the build process
        return None
    try:
        bspec, note = spec.build_spec()
        name = built_before(bspec)
    except (OSError, RuntimeError, ValueError):
        return None
    return f"rmsnorm: {name} ready ({note}), as built before" if name else None


def setup_failed(cmd: str, e: SetupError) -> int:
    if isinstance(e, NotJudgedError):  # its own verdict line, not a fault of the set-up
        print(not_judged_line(cmd, TargetSpec.from_env(), str(e)), file=sys.stderr, flush=True)
    else:
        print(f"{command()} {cmd}: set-up error: {e}", file=sys.stderr, flush=True)
    return EXIT_SETUP


def subcommand(args) -> int:
    interrupts.install()
    apply_target_env(args)
    start_cpu_fork_server()
    t_setup = time.perf_counter()
    try:
        preflight("the gate")
    except SetupError as e:
        return setup_failed("gate", e)
    except KeyboardInterrupt:
        print(f"\nrmsnorm gate INTERRUPTED: lane {session.lane_label()}, target {TargetSpec.from_env()}, "
              f"{provenance()}, during set-up (building and loading the target), {time.perf_counter() - t_setup:.0f} s wall; "
              "no law ran")
        return interrupts.exit_code()
    if args.budget <= 0:
        raise ValueError(f"gate: expected --budget > 0 seconds, but got {args.budget:g}")
    os.environ[session.BUDGET_ENV] = str(time.time() + args.budget)
    if args.workers is None:
        args.workers = default_processes(default_device())
    if args.workers <= 1:
        args.workers = 0
    if args.workers:  # xdist workers start their own; this one was only the check
        session.current().stop_runner()
    junit = Path(args.junit).resolve()
    junit.parent.mkdir(parents=True, exist_ok=True)
    pytest_args = [str(properties_dir()), f"--hypothesis-profile={args.profile}", f"--junitxml={junit}", "-q", "-rfE",
                   *laws_pytest_args()]
    if args.workers:
        pytest_args += ["-n", str(args.workers)]
    if args.report_json:
        pytest_args.append(f"--rmsnorm-report={Path(args.report_json).resolve()}")
    if any(a.startswith("-v") or a == "--verbose" for a in args.pytest_args):
        pytest_args.remove("-q")  # -v asks for the tracebacks the quiet reports leave out
    pytest_args += args.pytest_args
    # The run's tallies in a folder of the gate's own, read after pytest has ended (the plugin removes one it
    # made itself): whether Triton's interpreter could run the target, and what it could not judge.
    tallies = None
    if not os.environ.get("RMSNORM_TALLY_DIR"):
        tallies = tempfile.mkdtemp(prefix="rmsnorm-gate-tally-")
        os.environ["RMSNORM_TALLY_DIR"] = tallies
    t0 = time.perf_counter()
    freeze_imported_objects()
    try:
        code = pytest.main(pytest_args)
        recorded = Tally.read(Path(os.environ["RMSNORM_TALLY_DIR"]))
    finally:
        if tallies is not None:
            shutil.rmtree(tallies, ignore_errors=True)
            os.environ.pop("RMSNORM_TALLY_DIR", None)
    code = {pytest.ExitCode.OK: EXIT_PASSED, pytest.ExitCode.TESTS_FAILED: EXIT_FAILED,
            pytest.ExitCode.INTERRUPTED: EXIT_INTERRUPTED}.get(code, EXIT_SETUP)
    COVERAGE_VERDICT, NOT_RUN_HERE, RECORDED = (pytest_plugin.COVERAGE_VERDICT, pytest_plugin.NOT_RUN_HERE,
                                                pytest_plugin.RECORDED)
    # The verdict from what the run recorded: a law that failed fails the run however it stopped
    # (-x, --maxfail, -n, a signal); interrupted only when a signal stopped it with nothing failed.
    failed = RECORDED["failed"] + RECORDED["unfinished"]  # a law stopped while shrinking has failed
    if (failed or (RECORDED["worker_down"] and not interrupts.received())) and code != EXIT_SETUP:
        code = EXIT_FAILED
    elif interrupts.received() or code == EXIT_INTERRUPTED:  # laws cut off by a signal are not a failure
        code = interrupts.exit_code()
    verdict = {EXIT_PASSED: "PASSED", EXIT_FAILED: "FAILED"}.get(code, "SET-UP ERROR")
    if code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        verdict = f"INTERRUPTED ({interrupts.signal_name()})"

    if code == EXIT_FAILED and COVERAGE_VERDICT and not failed:  # every test passed: the floors failed it
        verdict += f" on coverage ({'; '.join(COVERAGE_VERDICT)}: see the FAIL lines above)"
    elif code == EXIT_FAILED and failed:  # laws failed, whatever the floors say besides
        said = describe_failed(RECORDED["failed"], RECORDED["unfinished"], COVERAGE_VERDICT, stopped=stopped_early())
        verdict += f" ({said})"
    if NOT_RUN_HERE:  # never a silent pass: what this GPU could not hold was not checked
        verdict += f" (not run on this GPU, too little free memory: {', '.join(NOT_RUN_HERE)})"
    if recorded.not_judged_why and code in (EXIT_PASSED, EXIT_FAILED):  # never a silent pass either
        verdict += f" (not judged under the interpreter: {', '.join(sorted(recorded.not_judged_why))})"
    if recorded.cannot_interpret and not interrupts.received():
        # The interpreter could not run the kernel: whatever else the run saw, the target was not judged.
        print("\n" + not_judged_line("gate", TargetSpec.from_env(), recorded.cannot_interpret)
              + f"; {time.perf_counter() - t0:.0f} s wall", flush=True)
        return EXIT_SETUP
    print(f"\nrmsnorm gate {verdict}: lane {session.lane_label()}, target {TargetSpec.from_env()}, {provenance()}, "
          f"profile {args.profile}, {time.perf_counter() - t0:.0f} s wall; JUnit XML: {junit}")
    return code


def describe_failed(tests: int, unfinished: int, coverage: list[str], stopped: bool = True) -> str:
    """What failed a run whose laws failed: its failed tests, the laws that failed with no final case (stopped
    while shrinking by a signal or the budget; else a failure that did not come back when run again), and any
    coverage floor not met besides."""
    how = "stopped while shrinking" if stopped else "nondeterministic (passed when run again)"
    parts = ([f"{tests} test(s) failed"] if tests else []) + \
            ([f"{unfinished} law(s) failed, {how}"] if unfinished else [])
    if coverage:
        parts.append(f"coverage too: {'; '.join(coverage)}")
    return "; ".join(parts)
