"""Command line: python -m harness {build,gate,fuzz,replay,sanitize,mutate} [options]."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from .build import ROOT


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


def commit(ignore: tuple[str, ...] = ()) -> str:
    """The commit a run is labelled with: $COMMIT when set, else git's HEAD, "+dirty" when tracked
    files other than those matching `ignore` (git pathspecs) have changed."""
    if os.environ.get("COMMIT"):  # set by .ci/gpu-lane on machines that get the tree without git
        return os.environ["COMMIT"]
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", "--", "."]
                               + [f":!{p}" for p in ignore], capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except OSError:
        return "unknown"


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

        path, dt = mutants.build_mutant(mutants.BY_NAME[spec[7:]])
        print(f"rmsnorm: {spec} ready in {dt:.1f} s: {path}")
        return 0
    bspec, note = build_spec_for(spec)
    t0 = time.perf_counter()
    module = build.build(bspec, verbose=args.verbose)
    print(f"rmsnorm: {module.__name__} ready ({note}) in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_gate(args) -> int:
    import pytest

    _apply_env(args)
    junit = Path(args.junit).resolve()
    junit.parent.mkdir(parents=True, exist_ok=True)
    pytest_args = [str(ROOT / "properties"), f"--hypothesis-profile={args.profile}", f"--junitxml={junit}",
                   "-p", "no:cacheprovider", "-q", "-rfEs", f"--rootdir={ROOT}", "-c", str(ROOT / "pyproject.toml")]
    if args.workers:
        pytest_args += ["-n", str(args.workers)]
    pytest_args += args.pytest_args
    t0 = time.perf_counter()
    code = pytest.main(pytest_args)
    from . import session

    verdict = "PASSED" if code == 0 else "FAILED"
    print(f"\nrmsnorm gate {verdict}: lane {session.lane()}, target {session.target_spec()}, commit {commit()}, "
          f"profile {args.profile}, {time.perf_counter() - t0:.0f} s wall; JUnit XML: {junit}")
    return int(code)


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
    finally:
        r.stop()
    if v.status in ("pass", "rejected", "not_applicable"):
        what = {"pass": "passes now", "rejected": "is rejected by the target (allowed)",
                "not_applicable": f"does not apply here ({v.message})"}[v.status]
        print(f"NOT REPRODUCED: the case {what}.")
        return 0
    print(f"REPRODUCED [{v.status}]:\n{v.message}")
    return 1


def cmd_fuzz(args) -> int:
    from .fuzz import fuzz

    _apply_env(args)
    return fuzz(minutes=args.minutes, laws=args.laws.split(",") if args.laws else None, chunk=args.chunk)


def cmd_sanitize(args) -> int:
    from . import sanitize
    from .target import parse_spec

    spec = parse_spec(args.target)
    if args.inner:
        return sanitize.inner(spec, args.cases)
    return sanitize.main(spec, args.tools.split(","), args.cases)


def cmd_toolchain(args) -> int:
    from . import toolchain

    return toolchain.main()


def cmd_mutate(args) -> int:
    from . import mutate

    names = [n for n in args.only.split(",") if n] if args.only else None
    return mutate.main(names=names, device=args.device, profile=args.profile, jobs=args.jobs, build_jobs=args.build_jobs,
                       with_baseline=not args.no_baseline, report=Path(args.report).resolve() if args.report else None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness", description="RMSNorm extension and its correctness gate")
    sub = p.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser("build", help="build (or find cached) the target extension")
    b.add_argument("--target", default=None)
    b.add_argument("--verbose", action="store_true", help="show the compiler commands")
    b.set_defaults(fn=cmd_build)

    g = sub.add_parser("gate", help="pre-merge gate: fixed seed and budget, the corpus, all laws")
    _target_args(g)
    g.add_argument("--profile", default="gate", choices=("gate", "ci", "dev", "fuzz"))
    g.add_argument("--junit", default=str(ROOT / ".build" / "gate-junit.xml"), help="where to write JUnit XML")
    g.add_argument("-n", "--workers", type=int, default=0, help="pytest-xdist workers (one GPU each when several)")
    g.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    g.set_defaults(fn=cmd_gate)

    f = sub.add_parser("fuzz", help="a fuzzing session with a progress display")
    _target_args(f)
    f.add_argument("--minutes", type=float, required=True, help="how long to fuzz")
    f.add_argument("--laws", default=None, help="comma-separated laws (default: all that apply)")
    f.add_argument("--chunk", type=int, default=50, help="examples per law before moving to the next")
    f.set_defaults(fn=cmd_fuzz)

    r = sub.add_parser("replay", help="reproduce one saved case and print a diagnosis")
    r.add_argument("case", help="corpus file, its name, or its id")
    r.add_argument("--target", default=None, help="target to replay on (default: the one recorded in the case)")
    r.add_argument("--device", choices=("cpu", "cuda"), default=None)
    r.add_argument("--lenient", action="store_true")
    r.set_defaults(fn=cmd_replay)

    z = sub.add_parser("sanitize", help="compute-sanitizer (memcheck, racecheck, initcheck, synccheck) on a sample")
    z.add_argument("--target", default=None)
    z.add_argument("--tools", default="memcheck,racecheck,initcheck,synccheck")
    z.add_argument("--cases", type=int, default=24, help="how many sampled cases")
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
    u.add_argument("--report", default=None, help="where to write the markdown table (default .build/mutants/runs-DEVICE/score.md)")
    u.set_defaults(fn=cmd_mutate)

    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, TypeError) as e:
        print(f"python -m harness {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
