"""Command line: python -m harness {build,gate,fuzz,replay,sanitize,toolchain,mutate,bench,profile,sheet} [options]."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from harness.running.locations import COMMAND_ENV, command, keep_caches_out_of_tmp, work_root

from harness.commands.exits import EXIT_CODES, EXIT_SETUP

DEFAULT_BUDGET_S = 1200.0  # 20 minutes: the gate in a CI job, with room for a cold build before it


def target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=None,
                   help="'project' (default), source files/folders separated by commas, module:NAME, "
                        "mutant:NAME (this project with a planted bug) or peer:NAME (an RMSNorm people ship: "
                        "hf, native, compiled, liger, ...)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="device to run the target on (default: cuda when a GPU is visible, else cpu)")
    p.add_argument("--corpus", default=None, help="folder of saved failing cases (default: corpus/)")
    p.add_argument("--lenient", action="store_true",
                   help="allow in-contract inputs to be rejected, and outputs wider than x's dtype where promotion "
                        "with the weight gives them (gradients: any wider float, which autograd casts back) "
                        "(default for targets other than 'project')")
    c = p.add_argument_group("the target's contract (declared: drawn only inside it, refusals inside it fail; "
                             "a module may declare RMSNORM_CONTRACT instead)")
    c.add_argument("--dtypes", default=None, help="comma-separated: float32,float64,float16,bfloat16")
    c.add_argument("--weight-dtypes", default=None, help="comma-separated: same (x's dtype), float32")
    c.add_argument("--layouts", default=None, help="comma-separated layouts of x and grad_out (harness.judging.cases.LAYOUTS)")
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
    v = p.add_argument_group("the RMSNorm it is (a variant of the card's; its call form: README, 'Judging a fused or "
                             "Gemma RMSNorm')")
    v.add_argument("--residual", default=None, choices=("none", "returned", "prenorm", "in_place"),
                   help="a fused residual add: the sum returned beside y (prenorm is the same), or written in place")
    v.add_argument("--residual-dtype", default=None, choices=("x", "float32"),
                   help="the residual stream's dtype: x's (default) or float32 (residual_in_fp32)")
    v.add_argument("--sum", default=None, choices=("float32", "stored"),
                   help="which sum a fused add normalises: the float32 one (default) or the one stored in the "
                        "residual's dtype")
    v.add_argument("--weight-offset", type=float, default=None, metavar="0|1",
                   help="1: the weight is applied as (1 + w), the 1 added in float32 (Gemma)")
    v.add_argument("--no-weight", action="store_true", help="no weight: y is the normalised x")
    v.add_argument("--order", default=None, choices=("cast_then_multiply", "multiply_in_float32", "all_in_dtype"),
                   help="where a 16-bit y is rounded: x_hat rounded, then times w (HF Llama); times w in float32, "
                        "rounded once (Gemma); all in the dtype (Liger 'none'); held bit for bit to its window")
    p.add_argument("--require", default=None, metavar="LAWS",
                   help="optional laws the target is held to, comma-separated: deterministic, batch-invariant, or "
                        "none (default: both for this project and its mutants, none for other targets)")


# What pyproject's extra `gate` brings: a model author's `pip install` leaves them out.
GATE_EXTRA = ("hypothesis", "pytest", "_pytest")


def main(argv: list[str] | None = None) -> int:
    keep_caches_out_of_tmp()
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
    b.set_defaults(run="harness.commands.build:subcommand")

    g = sub.add_parser("gate", help="pre-merge gate: fixed seed and budget, the corpus, all laws", epilog=EXIT_CODES)
    target_args(g)
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
    g.set_defaults(run="harness.commands.gate:subcommand")

    f = sub.add_parser("fuzz", help="a fuzzing session with a progress display")
    target_args(f)
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
    f.set_defaults(run="harness.commands.fuzz:subcommand")

    r = sub.add_parser("replay", help="reproduce one saved case and print a diagnosis")
    r.add_argument("case", help="corpus file, its name, or its id")
    r.add_argument("--target", default=None, help="target to replay on (default: the one recorded in the case)")
    r.add_argument("--device", choices=("cpu", "cuda"), default=None)
    r.add_argument("--lenient", action="store_true")
    r.set_defaults(run="harness.commands.replay:subcommand")

    z = sub.add_parser("sanitize", help="compute-sanitizer (memcheck, racecheck, initcheck, synccheck) side by side, "
                                        "on one case for each launch path")
    z.add_argument("--target", default=None)
    z.add_argument("--tools", default="memcheck,racecheck,initcheck,synccheck")
    z.add_argument("--cases", type=int, default=None, help="the first K path cases (default: all of them)")
    z.add_argument("--paths", default=None, help="the path cases by index, comma-separated (harness/tools/sanitize.py's PATHS)")
    z.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    z.set_defaults(run="harness.commands.sanitize:subcommand")

    tc = sub.add_parser("toolchain", help="probe the C++ toolchain afresh: does a TORCH_CHECK with a number raise?")
    tc.set_defaults(run="harness.commands.build:toolchain")

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
                   help="where the kept cases are (default harness/mutants/kills; DEVICE/NAME.json under it)")
    u.add_argument("--report", default=None, help="where to write the markdown table (default .build/mutants/runs-DEVICE/score.md)")
    u.set_defaults(run="harness.commands.mutate:subcommand")

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
    be.set_defaults(run="harness.commands.bench:subcommand")

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
    sh.set_defaults(run="harness.commands.sheet:subcommand")

    pr = sub.add_parser("profile", help="Nsight Compute on one shape, summarised (CUDA)")
    pr.add_argument("--shape", default="16384x4096", help="MxN (default 16384x4096)")
    pr.add_argument("--dtype", default="bfloat16")
    pr.add_argument("--direction", default="both", choices=("forward", "backward", "both"))
    pr.add_argument("--target", default=None, help="project (default), a source folder, module:NAME, or a peer name")
    pr.add_argument("--out", default=str(work_root() / "profile"), help="folder for the summary and the raw CSV")
    pr.set_defaults(run="harness.commands.profile:subcommand")

    args = p.parse_args(argv)
    try:
        # Each subcommand's module is imported only when it runs: most import torch, which --help and a
        # usage error need not wait for.
        module, function = args.run.split(":")
        try:
            run = getattr(importlib.import_module(module), function)
        except ModuleNotFoundError as e:
            if e.name not in GATE_EXTRA:
                raise
            print(f"{command()} {args.cmd}: error: the gate needs {e.name}, which is not installed here; "
                  f"install the gate's extra: python3 -m pip install \"rmsnorm-gate[gate]\" "
                  f"(from a clone: python3 -m pip install \".[gate]\")", file=sys.stderr)
            return EXIT_SETUP
        return run(args)
    except (ValueError, TypeError) as e:
        if os.environ.get("RMSNORM_TRACEBACK") == "1":
            raise
        print(f"{command()} {args.cmd}: error: {e} (RMSNORM_TRACEBACK=1 shows where)", file=sys.stderr)
        return EXIT_SETUP
    except KeyboardInterrupt:
        from harness.running import interrupts  # imported here: this module loads before any subcommand's

        print("\ninterrupted", file=sys.stderr)
        return interrupts.exit_code()
