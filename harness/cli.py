"""Command line: python -m harness {build,gate,fuzz,replay,sanitize,toolchain,mutate,bench,profile,sheet} [options]."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from .build import ROOT
from .locations import command, properties_dir, pytest_args as laws_pytest_args, work_root


def _target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=None,
                   help="'project' (default), source files/folders separated by commas, module:NAME, "
                        "mutant:NAME (this project with a planted bug) or peer:NAME (an RMSNorm people ship: "
                        "hf, native, compiled, liger, ...)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="device to run the target on (default: cuda when a GPU is visible, else cpu)")
    p.add_argument("--corpus", default=None, help="folder of saved failing cases (default: corpus/)")
    p.add_argument("--lenient", action="store_true",
                   help="allow in-contract inputs to be rejected (default for targets other than 'project')")
    c = p.add_argument_group("the target's contract (declared: drawn only inside it, refusals inside it fail; "
                             "a module may declare RMSNORM_CONTRACT instead)")
    c.add_argument("--dtypes", default=None, help="comma-separated: float32,float64,float16,bfloat16")
    c.add_argument("--weight-dtypes", default=None, help="comma-separated: same (x's dtype), float32")
    c.add_argument("--layouts", default=None, help="comma-separated layouts of x and grad_out (harness.cases.LAYOUTS)")
    c.add_argument("--weight-layouts", default=None,
                   help="comma-separated layouts of the weight: contiguous, offset, col_step (not given: all drawn, "
                        "and a weight that is not contiguous may be refused)")
    c.add_argument("--max-n", type=int, default=None, help="the largest N (last dimension) supported")
    c.add_argument("--max-row-bytes", type=int, default=None, metavar="B",
                   help="the longest row supported, in bytes of x (N * element size): one-block kernels")
    c.add_argument("--n-multiple-of", type=int, default=None, metavar="K",
                   help="N must be a multiple of K (kernels that need aligned rows)")
    c.add_argument("--no-zero-rows", action="store_true", help="inputs with zero rows are not supported")
    c.add_argument("--exclude", action="append", default=None, metavar="CLASS",
                   help="a class of inputs not supported, repeatable: one condition or two joined by '&' "
                        "(dtype=D, weight_dtype=D, layout=L, weight_layout=L, n>M, n%%K, zero_rows), e.g. "
                        "'dtype=bfloat16&n%%2' for an even N in bfloat16")
    p.add_argument("--require", default=None, metavar="LAWS",
                   help="optional laws the target is held to, comma-separated: deterministic, batch-invariant, or "
                        "none (default: both for this project and its mutants, none for other targets)")


def _apply_env(args) -> None:
    from .target import parse_spec

    if args.target:
        os.environ["RMSNORM_TARGET"] = parse_spec(args.target)
    if args.device:
        os.environ["RMSNORM_DEVICE"] = args.device
    if args.corpus:
        os.environ["RMSNORM_CORPUS"] = str(Path(args.corpus).resolve())
    if args.lenient:
        os.environ["RMSNORM_STRICT"] = "0"
    if getattr(args, "require", None) is not None:
        from .laws import registry  # noqa: F401  (the laws register themselves)
        from .laws.registry import REQUIRE_ENV, parse_required

        parse_required(args.require)  # a ValueError names what was wrong (exit 2)
        os.environ[REQUIRE_ENV] = args.require
    from .contract import ENV, from_args

    declared = from_args(args.dtypes, args.weight_dtypes, args.layouts, args.max_n, args.no_zero_rows,
                         args.n_multiple_of, args.max_row_bytes, args.weight_layouts, args.exclude)
    if declared is not None:
        import json

        os.environ[ENV] = json.dumps(declared)
        os.environ[ENV + "_FROM"] = "cli"


def commit(ignore: tuple[str, ...] = ()) -> str:
    """The commit a run is labelled with: $COMMIT when set, else git's HEAD, "+dirty" when tracked
    files other than those matching `ignore` (git pathspecs) have changed."""
    if os.environ.get("COMMIT"):  # set by .ci/gpu-lane on machines that get the tree without git
        return os.environ["COMMIT"]
    if not _in_a_clone():
        return "unknown"
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", "--", "."]
                               + [f":!{p}" for p in ignore], capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except OSError:
        return "unknown"


def _in_a_clone() -> bool:
    """Whether the harness runs from a clone of this project (its folder is a git checkout's top),
    not from an installed copy, which may sit inside some other repository (a Python installation's
    own checkout once lent the gate its commit)."""
    try:
        top = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True).stdout.strip()
    except OSError:
        return False
    return bool(top) and Path(top).resolve() == Path(ROOT).resolve()


def provenance() -> str:
    """What a verdict line names the harness by: the commit in a clone ($COMMIT when set), else the
    installed package's version."""
    c = commit()
    if c != "unknown":
        return f"commit {c}"
    from importlib import metadata

    try:
        return f"rmsnorm-gate {metadata.version('rmsnorm-gate')} (installed)"
    except metadata.PackageNotFoundError:
        return "commit unknown"


def cmd_build(args) -> int:
    from .target import build_spec_for, is_prebuilt, parse_spec
    from . import build

    spec = parse_spec(args.target)
    if is_prebuilt(spec):
        print(f"rmsnorm: {spec} is prebuilt; nothing to build")
        return 0
    from . import toolchain

    print(f"rmsnorm: {toolchain.probe().line()}", flush=True)
    if spec.startswith("mutant:"):
        from . import mutants

        from .target import default_device

        path, dt = mutants.build_mutant(mutants.BY_NAME[spec[7:]], device=args.device or default_device())
        print(f"rmsnorm: {spec} ready in {dt:.1f} s: {path}")
        return 0
    bspec, note = build_spec_for(spec)
    t0 = time.perf_counter()
    module = build.build(bspec, verbose=args.verbose)
    print(f"rmsnorm: {module.__name__} ready ({note}) in {time.perf_counter() - t0:.1f} s")
    return 0


DEFAULT_BUDGET_S = 1200.0  # 20 minutes: the gate in a CI job, with room for a cold build before it
EXIT_PASSED, EXIT_FAILED, EXIT_SETUP, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143
EXIT_CODES = ("exit codes: 0 passed; 1 the target failed (a law broke, or too few cases were checked), however "
              "the run stopped; 2 usage or set-up error (no GPU, the target does not build or import, toolchain "
              "broken); 130 interrupted by Ctrl-C (SIGINT) and 143 by SIGTERM, with nothing failed: the report of "
              "what was checked is printed either way")


class SetupError(Exception):
    """The run cannot judge the target here: one line saying why, before any test runs."""


def preflight(what: str) -> None:
    """Set-up checks before any test runs: the device, the build, the target's import. Raises
    SetupError with one line; the build's whole output is kept in .build/setup-error.log."""
    import torch

    from . import interrupts, session
    from .target import is_prebuilt
    from .worker import HarnessError

    spec, dev = session.target_spec(), session.device()
    if dev == "cuda" and not torch.cuda.is_available():
        raise SetupError(f"device cuda was asked for, but torch {torch.__version__} sees no GPU here"
                         + ("" if torch.version.cuda else " (a CPU-only build of torch)"))
    if not is_prebuilt(spec):
        ready = _built_before(spec)
        if ready:
            print(ready, flush=True)
        else:
            _build_in_a_process(spec, dev)
        os.environ["RMSNORM_BUILT"] = spec  # pytest's session start need not build it again
    try:
        session.runner()
    except HarnessError as e:
        interrupts.check()  # a worker the interrupt ended while it loaded the target: the interrupt's
        lines = [ln for ln in str(e).splitlines()[1:] if ln.strip()] or [str(e)]
        raise SetupError(f"target {spec} could not be loaded for {what}: {lines[0][:300]}") from None


def _build_in_a_process(spec: str, device: str) -> None:
    """Build the target for device in a process of its own; SetupError with one line where it does
    not build."""
    from . import interrupts

    p = subprocess.run([sys.executable, "-m", "harness", "build", "--target", spec, "--device", device],
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


def _built_before(spec: str) -> str | None:
    """The "ready" line of a build of this target that compiled and imported here before (same key:
    sources, headers, flags, torch), or None. The worker that loads it checks it is up to date (ninja)
    as every load does; a process started only to build it again cost about 2 s a run."""
    if spec.startswith("mutant:"):
        return None
    from . import toolchain
    from .build import built_before
    from .target import build_spec_for

    if toolchain.cached() is None:  # the key holds the toolchain's flags: probed in the build process
        return None
    try:
        bspec, note = build_spec_for(spec)
        name = built_before(bspec)
    except (OSError, RuntimeError, ValueError):
        return None
    return f"rmsnorm: {name} ready ({note}), as built before" if name else None


def _setup_failed(cmd: str, e: SetupError) -> int:
    print(f"{command()} {cmd}: set-up error: {e}", file=sys.stderr, flush=True)
    return EXIT_SETUP


def cmd_gate(args) -> int:
    import pytest

    from . import interrupts
    from .worker import start_cpu_fork_server

    interrupts.install()
    _apply_env(args)
    start_cpu_fork_server()
    t_setup = time.perf_counter()
    try:
        preflight("the gate")
    except SetupError as e:
        return _setup_failed("gate", e)
    except KeyboardInterrupt:
        from . import session

        print(f"\nrmsnorm gate INTERRUPTED: lane {session.lane()}, target {session.target_spec()}, {provenance()}, "
              f"during set-up (building and loading the target), {time.perf_counter() - t_setup:.0f} s wall; "
              "no law ran")
        return interrupts.exit_code()
    if args.budget <= 0:
        raise ValueError(f"gate: expected --budget > 0 seconds, but got {args.budget:g}")
    from .session import BUDGET_ENV

    os.environ[BUDGET_ENV] = str(time.time() + args.budget)
    if args.workers is None:
        from .gpus import default_processes
        from .target import default_device

        args.workers = default_processes(default_device())
    if args.workers <= 1:
        args.workers = 0
    if args.workers:  # xdist workers start their own; this one was only the check
        from . import session

        session.stop_runner()
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
    t0 = time.perf_counter()
    from .heap import freeze_imported_objects

    freeze_imported_objects()
    code = pytest.main(pytest_args)
    from . import session

    code = {pytest.ExitCode.OK: EXIT_PASSED, pytest.ExitCode.TESTS_FAILED: EXIT_FAILED,
            pytest.ExitCode.INTERRUPTED: EXIT_INTERRUPTED}.get(code, EXIT_SETUP)
    from .pytest_plugin import COVERAGE_VERDICT, NOT_RUN_HERE, RECORDED

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
        verdict += f" ({describe_failed(RECORDED['failed'], RECORDED['unfinished'], COVERAGE_VERDICT)})"
    if NOT_RUN_HERE:  # never a silent pass: what this GPU could not hold was not checked
        verdict += f" (not run on this GPU, too little free memory: {', '.join(NOT_RUN_HERE)})"
    print(f"\nrmsnorm gate {verdict}: lane {session.lane()}, target {session.target_spec()}, {provenance()}, "
          f"profile {args.profile}, {time.perf_counter() - t0:.0f} s wall; JUnit XML: {junit}")
    return code


def describe_failed(tests: int, unfinished: int, coverage: list[str]) -> str:
    """What failed a run whose laws failed: its failed tests, the laws stopped while shrinking (a
    signal, the end of a session), and any coverage floor not met besides."""
    parts = ([f"{tests} test(s) failed"] if tests else []) + \
            ([f"{unfinished} law(s) failed, stopped while shrinking"] if unfinished else [])
    if coverage:
        parts.append(f"coverage too: {'; '.join(coverage)}")
    return "; ".join(parts)


def cmd_replay(args) -> int:
    from . import corpus
    from .target import parse_spec
    from .worker import Runner, lane_of

    path = corpus.resolve(args.case)
    entry = corpus.load_entry(path)
    spec = args.target or (entry.target or {}).get("spec") or "project"
    try:
        spec = parse_spec(spec)
    except ValueError as e:
        print(f"rmsnorm: the saved target is gone ({e}); replaying on this project's extension instead")
        spec = "project"
    from .target import default_device

    device = args.device or default_device()
    print(f"case {path.name}: law {entry.law}")
    print(f"  {entry.case.short()}")
    if entry.error:
        first = entry.error.splitlines()[0]
        print(f"  saved error: {first}")
    print(f"replaying on target {spec}, lane {lane_of(device)} ...")
    r = Runner(spec, device, strict=False if args.lenient else None)
    r.start()
    try:
        v = r.check(entry.law, entry.case)
        from .session import REFUSED

        if v.status == "rejected" and REFUSED in (entry.error or ""):
            # The saved failure is a refusal that no class of inputs explained: judged again, by asking
            # the target about the cases around it (harness.refusals).
            from .refusals import Inference

            def ask(law, case):
                verdict = r.check(law, case)
                return verdict.status, verdict.message

            finding = Inference(has_backward=bool(r.info.get("has_backward"))).judge(entry.law, entry.case,
                                                                                     v.message, ask)
            if not finding.explained_by:
                v = type(v)("crash", f"{REFUSED}: {v.message.splitlines()[0]}\n  {finding.message}", v.facts)
    finally:
        r.stop()
    if v.status == "no_room":
        print(f"NOT RUN: the case needs more GPU memory than this GPU has free ({v.message.splitlines()[0]}); "
              "replay it on a GPU with more free memory")
        return 2
    if v.status in ("pass", "rejected", "not_applicable"):
        what = {"pass": "passes now", "rejected": "is rejected by the target (allowed)",
                "not_applicable": f"does not apply here ({v.message})"}[v.status]
        print(f"NOT REPRODUCED: the case {what}.")
        from .session import ALONE

        alone = next((line.strip() for line in (entry.error or "").splitlines() if line.strip().startswith(ALONE)),
                     None)
        if alone:  # the run that saved it ran it alone too, and said what that means
            print(f"  as the run that saved it found: {alone}")
        return 0
    print(f"REPRODUCED [{v.status}]:\n{v.message}")
    return 1


def cmd_fuzz(args) -> int:
    from . import interrupts
    from .fuzz import campaign, default_workers, fuzz
    from .worker import start_cpu_fork_server

    interrupts.install()
    _apply_env(args)
    if args.database:
        from .fuzz import DB_ENV, example_database

        example_database(args.database)  # a ValueError names what is missing (exit 2)
        db = args.database
        os.environ[DB_ENV] = db if db.startswith("redis://") else str(Path(db).resolve())
    laws = args.laws.split(",") if args.laws else None
    start_cpu_fork_server()
    if args.worker_status:  # one worker of a campaign: its parent did the set-up checks
        return fuzz(minutes=args.minutes, laws=laws, chunk=args.chunk, status=Path(args.worker_status),
                    offset=args.worker_offset)
    t0 = time.perf_counter()
    try:
        preflight("fuzzing")
    except SetupError as e:
        return _setup_failed("fuzz", e)
    except KeyboardInterrupt:
        from .fuzz import interrupted_in_set_up

        return interrupted_in_set_up(time.perf_counter() - t0)
    from .target import default_device

    workers = args.workers if args.workers is not None else default_workers(default_device())
    if workers == 1:
        return fuzz(minutes=args.minutes, laws=laws, chunk=args.chunk)
    return campaign(workers=workers, minutes=args.minutes, laws=laws, chunk=args.chunk, device=default_device())


def cmd_sanitize(args) -> int:
    from . import sanitize
    from .target import parse_spec

    spec = parse_spec(args.target)
    paths = sanitize.parse_paths(args.paths)
    if paths and args.cases is not None:
        raise ValueError("sanitize: --cases (the first K path cases) and --paths (chosen ones) exclude each other")
    if args.inner:
        return sanitize.inner(spec, args.cases, paths)
    return sanitize.main(spec, args.tools.split(","), args.cases, paths)


def cmd_toolchain(args) -> int:
    from . import toolchain

    return toolchain.main()


def cmd_mutate(args) -> int:
    from . import mutate

    names = [n for n in args.only.split(",") if n] if args.only else None
    return mutate.main(names=names, device=args.device, profile=args.profile, jobs=args.jobs, build_jobs=args.build_jobs,
                       with_baseline=not args.no_baseline, report=Path(args.report).resolve() if args.report else None,
                       fresh=args.fresh, keep_new=args.keep,
                       kills_dir=Path(args.kills_dir).resolve() if args.kills_dir else None)


def _csv(value: str, what: str, allowed=None, conv=str) -> list:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise ValueError(f"{what}: expected a comma-separated list, but got {value!r}")
    out = []
    for v in items:
        try:
            v = conv(v)
        except ValueError:
            raise ValueError(f"{what}: expected {conv.__name__} values, but got {v!r}") from None
        if allowed is not None and v not in allowed:
            raise ValueError(f"{what}: expected values from {', '.join(map(str, allowed))}, but got {v!r}")
        out.append(v)
    return out


def cmd_bench(args) -> int:
    from . import bench, interrupts

    if args.plot:
        results, ceiling, meta = bench.load_json(Path(args.plot))
        print(bench.plot(results, ceiling, Path(args.plot).with_suffix(".png")))
        return 0
    import torch

    if not torch.cuda.is_available():
        print(f"{command()} bench: set-up error: the benchmark needs a CUDA GPU, and torch {torch.__version__} "
              "sees none here", file=sys.stderr)
        return EXIT_SETUP
    dtypes = _csv(args.dtypes, "--dtypes", tuple(bench.DTYPES))
    ns = _csv(args.n, "--n", conv=int) if args.n else list(bench.DEFAULT_NS)
    if any(n < 1 for n in ns):
        raise ValueError(f"--n: expected positive row lengths, but got {args.n!r}")
    peers = _csv(args.peers, "--peers", bench.PEERS) if args.peers else []
    targets = _csv(args.target, "--target") if args.target else ["project"]
    impls, skipped = bench.implementations(targets, peers)
    for line in skipped:
        print(f"bench: not run: {line}", file=sys.stderr)
    directions = tuple(_csv(args.directions, "--directions", ("forward", "backward")))
    # SIGTERM (a deadline's `timeout`) stops the run as Ctrl-C does, at once: the steps that finished are saved.
    previous = interrupts.install(at_once=True)
    try:
        results, ceiling, stopped = bench.run(impls, dtypes, ns, args.elements, decode=not args.no_decode,
                                              directions=directions)
    finally:
        interrupts.restore(previous)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "commit": commit(),
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "elements": args.elements,
            "not_run": skipped, "stopped": stopped}
    md_path, plot_line = bench.save(results, ceiling, meta, Path(args.out))
    print(md_path.read_text())
    print(f"bench: {md_path}, {md_path.with_suffix('.json')}; {plot_line}")
    if stopped:
        print(f"bench: {stopped} ({interrupts.signal_name()})", file=sys.stderr)
        return interrupts.exit_code()
    return 0


def cmd_sheet(args) -> int:
    from . import sheet
    from .target import default_device

    device = args.device or default_device()
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(f"{command()} sheet: set-up error: device cuda was asked for, but torch {torch.__version__} "
                  "sees no GPU here", file=sys.stderr)
            return EXIT_SETUP
    default = "project,peer:hf,peer:native" + (",peer:liger" if device == "cuda" else "")
    targets = _csv(args.target or default, "--target")
    if args.side_by_side is not None and args.side_by_side < 1:
        raise ValueError(f"--side-by-side: expected at least 1 gate at a time, but got {args.side_by_side}")
    return sheet.main(targets, device, gate_profile=args.gate_profile, budget=args.budget, out_dir=Path(args.out),
                      commit=commit(), side_by_side=args.side_by_side)


def cmd_profile(args) -> int:
    from . import profile

    return profile.main(args)


def main(argv: list[str] | None = None) -> int:
    from .locations import keep_caches_out_of_tmp

    keep_caches_out_of_tmp()
    from .locations import COMMAND_ENV

    os.environ.setdefault(COMMAND_ENV, command())  # its workers and subprocesses name it the same way
    p = argparse.ArgumentParser(prog=command(), description="RMSNorm extension and its correctness gate",
                                epilog=EXIT_CODES)
    sub = p.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser("build", help="build (or find cached) the target extension")
    b.add_argument("--target", default=None)
    b.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="the device the target will run on (default: cuda when a GPU is visible, else cpu); "
                        "a mutant is built without its CUDA sources for the CPU")
    b.add_argument("--verbose", action="store_true", help="show the compiler commands")
    b.set_defaults(fn=cmd_build)

    g = sub.add_parser("gate", help="pre-merge gate: fixed seed and budget, the corpus, all laws", epilog=EXIT_CODES)
    _target_args(g)
    g.add_argument("--profile", default="gate", choices=("gate", "ci", "dev", "fuzz"))
    g.add_argument("--junit", default=str(work_root() / "gate-junit.xml"), help="where to write JUnit XML")
    g.add_argument("--report-json", default=None,
                   help="also write what the run checked as JSON (per law, per category, failures, accuracy)")
    g.add_argument("-n", "--workers", type=int, default=None,
                   help="pytest-xdist workers, spread over the GPUs (default: several a GPU as the cores allow, at "
                        "most 4; on the CPU one per 4 cores; 0 or 1: none)")
    g.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S,
                   help=f"wall-time budget in seconds (default {DEFAULT_BUDGET_S:.0f}): past it no law draws a new case; "
                        "what was checked is judged against the coverage floor, and the laws cut short are named"),
    g.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    g.set_defaults(fn=cmd_gate)

    f = sub.add_parser("fuzz", help="a fuzzing session with a progress display")
    _target_args(f)
    f.add_argument("--minutes", type=float, required=True, help="how long to fuzz")
    f.add_argument("--laws", default=None, help="comma-separated laws (default: all that apply)")
    f.add_argument("--chunk", type=int, default=50, help="examples per law before moving to the next")
    f.add_argument("--workers", type=int, default=None,
                   help="processes fuzzing at once, spread over the GPUs, sharing the corpus and Hypothesis' "
                        "database (default: several a GPU as the cores allow, at most 4; one per 4 cores on the CPU)")
    f.add_argument("--database", default=None,
                   help="Hypothesis' example database: a folder (several hosts may share one) or redis://host:port/db "
                        "(default: .hypothesis/examples)")
    f.add_argument("--worker-status", default=None, help=argparse.SUPPRESS)
    f.add_argument("--worker-offset", type=int, default=0, help=argparse.SUPPRESS)
    f.set_defaults(fn=cmd_fuzz)

    r = sub.add_parser("replay", help="reproduce one saved case and print a diagnosis")
    r.add_argument("case", help="corpus file, its name, or its id")
    r.add_argument("--target", default=None, help="target to replay on (default: the one recorded in the case)")
    r.add_argument("--device", choices=("cpu", "cuda"), default=None)
    r.add_argument("--lenient", action="store_true")
    r.set_defaults(fn=cmd_replay)

    z = sub.add_parser("sanitize", help="compute-sanitizer (memcheck, racecheck, initcheck, synccheck) side by side, "
                                        "on one case for each launch path")
    z.add_argument("--target", default=None)
    z.add_argument("--tools", default="memcheck,racecheck,initcheck,synccheck")
    z.add_argument("--cases", type=int, default=None, help="the first K path cases (default: all of them)")
    z.add_argument("--paths", default=None, help="the path cases by index, comma-separated (harness/sanitize.py's PATHS)")
    z.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    z.set_defaults(fn=cmd_sanitize)

    tc = sub.add_parser("toolchain", help="probe the C++ toolchain afresh: does a TORCH_CHECK with a number raise?")
    tc.set_defaults(fn=cmd_toolchain)

    u = sub.add_parser("mutate", help="mutation score: build each planted-bug mutant and run the suite on it")
    u.add_argument("--profile", default="gate", choices=("gate", "fuzz", "ci", "dev"))
    u.add_argument("--only", default=None, help="comma-separated mutant names (default: all of this device's)")
    u.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="device (default: cuda when a GPU is visible); it picks the mutants that break its code")
    u.add_argument("-j", "--jobs", type=int, default=1, help="mutants judged at once")
    u.add_argument("-b", "--build-jobs", type=int, default=1, help="mutants built at once (each in its own scratch tree)")
    u.add_argument("--no-baseline", action="store_true", help="skip the seed card's single-check baseline")
    u.add_argument("--fresh", action="store_true",
                   help="ignore the kept killing cases: search every mutant with the whole suite")
    u.add_argument("--keep", action="store_true",
                   help="keep the case of each kill a fresh search found as that mutant's kept case")
    u.add_argument("--kills-dir", default=None,
                   help="where the kept cases are (default harness/mutant_kills; DEVICE/NAME.json under it)")
    u.add_argument("--report", default=None, help="where to write the markdown table (default .build/mutants/runs-DEVICE/score.md)")
    u.set_defaults(fn=cmd_mutate)

    be = sub.add_parser("bench", help="speed beside the peers through the users' path (modules, autograd) and of the "
                                      "raw operators: GB/s forward and backward, decode latency (CUDA)")
    be.add_argument("--target", default=None,
                    help="comma-separated targets to time first (default: project): source folders or module:NAME")
    be.add_argument("--peers", default=",".join(("hf", "torch", "compiled", "liger", "quack")),
                    help="comma-separated peers beside them, each as its users call it: hf (LlamaRMSNorm), torch "
                         "(torch.nn.RMSNorm), compiled (torch.compile of LlamaRMSNorm), liger (LigerRMSNorm), quack; "
                         "those not installed are listed as not run ('' for none)")
    be.add_argument("--dtypes", default="bfloat16,float16,float32")
    be.add_argument("--n", default=None, help="comma-separated row lengths (default: 512, 1024, ... 262144)")
    be.add_argument("--elements", type=int, default=1 << 26, help="M * N of each shape (default 2^26)")
    be.add_argument("--directions", default="forward,backward")
    be.add_argument("--no-decode", action="store_true", help="leave out the decode shapes (CUDA graphs)")
    be.add_argument("--out", default=str(work_root() / "bench"), help="folder for bench.md, bench.json, bench.png")
    be.add_argument("--plot", default=None, metavar="BENCH_JSON", help="only draw the plot of a saved bench.json")
    be.set_defaults(fn=cmd_bench)

    sh = sub.add_parser("sheet", help="a property sheet: one column a target, one row a property (bitwise "
                                      "determinism and batch invariance, what it accepts, accuracy, the gate), "
                                      "each column read from one gate run on its target")
    sh.add_argument("--target", default=None,
                    help="comma-separated targets (default: project, peer:hf, peer:native, and peer:liger on CUDA); "
                         "peer:hf is always added as eager PyTorch")
    sh.add_argument("--device", choices=("cpu", "cuda"), default=None)
    sh.add_argument("--side-by-side", type=int, default=None,
                    help="gates running at once (default: as many as the gate would run processes, at least 2)")
    sh.add_argument("--gate-profile", default="dev", choices=("dev", "ci", "gate"))
    sh.add_argument("--budget", type=float, default=600.0, help="wall-time budget of each gate run, seconds")
    sh.add_argument("--out", default=str(work_root() / "sheet"), help="folder for sheet.md, sheet.json, sheet.png")
    sh.set_defaults(fn=cmd_sheet)

    pr = sub.add_parser("profile", help="Nsight Compute on one shape, summarised (CUDA)")
    pr.add_argument("--shape", default="16384x4096", help="MxN (default 16384x4096)")
    pr.add_argument("--dtype", default="bfloat16")
    pr.add_argument("--direction", default="both", choices=("forward", "backward", "both"))
    pr.add_argument("--target", default=None, help="project (default), a source folder, module:NAME, or a peer name")
    pr.add_argument("--out", default=str(work_root() / "profile"), help="folder for the summary and the raw CSV")
    pr.set_defaults(fn=cmd_profile)

    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, TypeError) as e:
        if os.environ.get("RMSNORM_TRACEBACK") == "1":
            raise
        print(f"{command()} {args.cmd}: error: {e} (RMSNORM_TRACEBACK=1 shows where)", file=sys.stderr)
        return EXIT_SETUP
    except KeyboardInterrupt:
        from . import interrupts

        print("\ninterrupted", file=sys.stderr)
        return interrupts.exit_code()
