"""Speed of RMSNorm implementations on one GPU, side by side in one run: ``python -m harness bench``.

Two tables, each implementation called as its users call it:
  users' path  the modules a model holds, forward (``module(x)``) and backward through autograd
               (``torch.autograd.grad`` of the module's output, replaying the recorded graph):
               this project's ``RMSNorm``, ``torch.nn.RMSNorm`` (F.rms_norm), Hugging Face's
               LlamaRMSNorm, ``torch.compile`` of it, Liger-Kernel's ``LigerRMSNorm`` and quack's
               ``rmsnorm`` when installed. The README's speed table comes from this one.
  operators    the raw operators, called directly: this project's ``torch.ops.rmsnorm``, the
               fused ATen operators behind F.rms_norm, Liger-Kernel's forward/backward functions.
Per dtype and shape (M rows of N, M * N = 2^26 by default), each figure is the lower of two
medians of CUDA-event timings taken one after the other, with the L2 cache flushed before every
call (triton.testing.do_bench when Triton is installed, the same method otherwise); bench.json
keeps both medians. One median alone was not steady: in one run on the H200 the users' path
backward at bfloat16 N = 8192 read 1.4 to 2.8 times its operator's time in 3 of 7 processes for
the whole of its timing, where the operator, timed next, and every later shape read the same. Bytes
are the least a kernel must move: forward reads x and writes y (2 M N elements), backward reads x
and grad_out and writes grad_x (3 M N); the weight and the statistic are left out. The copy
ceiling is a 1 GiB device-to-device copy timed in the same run (bytes read plus written).

Decode shapes (M = 1 ... 512 rows of N = 4096 and 8192, bfloat16, forward through the users'
path): one CUDA graph of 20 calls, replayed; microseconds per call.

Each implementation's outputs are checked against float64 before it is timed at a shape; one
that is wrong there is reported as wrong, not timed.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable
from pathlib import Path

import torch

from harness.running.locations import command
import torch._dynamo

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DEFAULT_NS = tuple(1 << k for k in range(9, 19))  # 512 ... 262144
DECODE_MS = (1, 8, 64, 512)
DECODE_NS = (4096, 8192)
PEERS = ("hf", "torch", "compiled", "liger", "quack")
USERS, OPERATORS = "users", "operators"
PATH_TITLES = {USERS: "the users' path: the module, backward through autograd",
               OPERATORS: "the raw operators, called directly"}
EPS = 1e-6
GRAPH_CALLS = 20


@dataclass
class Calls:
    """One implementation set up for one shape: forward() gives y; backward() runs one backward
    of a recorded forward and gives (grad_x, grad_weight)."""
    forward: Callable
    backward: Callable


@dataclass
class Impl:
    name: str
    path: str  # USERS or OPERATORS
    setup: Callable  # (x, w, dy) -> Calls
    note: str = ""


@dataclass
class Result:
    impl: str
    dtype: str
    n: int
    m: int
    direction: str  # forward | backward | decode
    ms: float | None = None
    gbps: float | None = None
    error: str = ""  # why there is no time (wrong, refused, crashed)
    extra: dict = field(default_factory=dict)
    path: str = USERS


# ---- implementations ---------------------------------------------------------------------------


# ---- timing ------------------------------------------------------------------------------------


def _flush_buffer() -> torch.Tensor:
    return torch.empty(256 << 20, dtype=torch.int8, device="cuda")


def time_ms(fn: Callable, *, warmup_ms: float = 25, rep_ms: float = 100) -> float:
    """Median milliseconds of fn, L2 flushed before each call."""
    try:  # an optional dependency
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    except ImportError:
        pass
    cache = _flush_buffer()
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        cache.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    est = max(start.elapsed_time(end) / 5, 1e-3)
    n_warm, n_rep = max(1, int(warmup_ms / est)), max(1, int(rep_ms / est))
    return flushed_ms(fn, cache.zero_, reps=n_rep, warmup=n_warm)


def flushed_ms(fn: Callable, flush: Callable, *, reps: int, warmup: int = 0) -> float:
    """Median milliseconds of fn over reps calls, each after flush() (outside the events), after warmup calls:
    the one timing loop (time_ms without Triton; benchmarks/ceilings.py with another flush)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        flush()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def copy_ceiling_gbps() -> float:
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))
    del src, dst
    return 2 * (1 << 30) / (ms * 1e-3) / 1e9


def graph_us(fn: Callable, calls: int = GRAPH_CALLS) -> float:
    """Microseconds per call of fn replayed from one CUDA graph of `calls` calls."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(30):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times) * 1e3 / calls


# ---- correctness spot check --------------------------------------------------------------------


def _max_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    """The largest elementwise error over the largest reference magnitude (inf when any output
    is not finite): an unwritten or misplaced element shows, however large the tensor."""
    got = got.double()
    if got.shape != ref.shape:
        return math.inf
    if not torch.isfinite(got).all():
        return math.inf
    return float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-300))


def _limit(dtype: torch.dtype) -> float:
    return 1e-4 if dtype == torch.float32 else 2e-2


def reference(x, w, dy) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """y, grad_x and grad_weight in float64."""
    x64 = x.double().requires_grad_()
    w64 = w.double().requires_grad_()
    y64 = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + EPS) * w64
    gx64, gw64 = torch.autograd.grad(y64, (x64, w64), dy.double())
    return y64.detach(), gx64, gw64


def check(calls: Calls, x, ref) -> str:
    """'' when y, grad_x and grad_weight are near float64's, else what is wrong."""
    out = calls.forward()
    y = out[0] if isinstance(out, (tuple, list)) else out
    bad = []
    grads = calls.backward()
    for what, got, want in (("y", y, ref[0]), ("grad_x", grads[0], ref[1]), ("grad_weight", grads[1], ref[2])):
        err = _max_err(got, want)
        if not err <= _limit(x.dtype):
            bad.append(f"{what} max error {err:.3g} of the largest value")
    return "; ".join(bad)


# ---- the run -----------------------------------------------------------------------------------


class Progress:
    def __init__(self, total: int) -> None:
        self.total, self.done, self.t0, self.current = total, 0, time.monotonic(), "before the first step"
        self.tty = sys.stderr.isatty()

    def step(self, what: str) -> None:
        self.done += 1
        self.current = what
        line = f"bench [{self.done}/{self.total}] {time.monotonic() - self.t0:5.0f} s  {what}"
        print(("\r" + line.ljust(100)) if self.tty else line, end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def why_failed(e: Exception) -> str:
    """One line for a table cell: what an implementation raised ("raised TypeError: ..."), at most 160
    characters of its message's first line."""
    return f"raised {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def run(impls: list[Impl], dtypes: list[str], ns: list[int], elements: int, decode: bool,
        directions: tuple[str, ...] = ("forward", "backward")) -> tuple[list[Result], float, str]:
    """Time every implementation at every shape: (the results, the copy ceiling, '' or how the run was stopped).
    Stopped by Ctrl-C or SIGTERM (a deadline's `timeout`), it returns the results of the steps that finished and
    a line that says where it stopped, so that the caller saves them: a long run loses only the step it was in."""
    results: list[Result] = []
    ceiling = copy_ceiling_gbps()
    users = [i for i in impls if i.path == USERS]
    steps = len(dtypes) * len(ns) * len(impls) + (len(DECODE_MS) * len(DECODE_NS) * len(users) if decode else 0)
    prog = Progress(steps)
    try:
        _run_steps(impls, users, dtypes, ns, elements, decode, directions, results, prog)
    except KeyboardInterrupt:
        prog.close()
        return results, ceiling, (f"stopped by an interrupt in step {prog.done} of {steps} ({prog.current}); "
                                  f"the tables hold the {len(results)} timings that finished before it")
    prog.close()
    return results, ceiling, ""


def _run_steps(impls: list[Impl], users: list[Impl], dtypes: list[str], ns: list[int], elements: int, decode: bool,
               directions: tuple[str, ...], results: list[Result], prog: Progress) -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    for dname in dtypes:
        dtype = DTYPES[dname]
        for n in ns:
            m = max(1, elements // n)
            x = torch.randn(m, n, device="cuda", dtype=dtype, generator=gen)
            w = (1 + 0.1 * torch.randn(n, device="cuda", generator=gen)).to(dtype)
            dy = torch.randn(m, n, device="cuda", dtype=dtype, generator=gen)
            s = x.element_size()
            ref = reference(x, w, dy)
            for impl in impls:
                prog.step(f"{dname} {m}x{n} {impl.name} ({impl.path})")
                calls = None
                try:
                    # A copy of grad_out each: an implementation that writes its gradient into grad_out
                    # (Liger-Kernel's default in_place=True) must not corrupt the others' input.
                    calls = impl.setup(x, w, dy.clone())
                    wrong = check(calls, x, ref)
                except Exception as e:  # refusals and crashes are reported, not fatal
                    wrong = why_failed(e)
                for direction in directions:
                    r = Result(impl.name, dname, n, m, direction, path=impl.path)
                    if wrong:
                        r.error = wrong
                    else:
                        try:
                            fn = calls.forward if direction == "forward" else calls.backward
                            medians = [time_ms(fn), time_ms(fn)]
                            r.ms = min(medians)
                            r.extra["medians_ms"] = medians
                            r.gbps = (2 if direction == "forward" else 3) * m * n * s / (r.ms * 1e-3) / 1e9
                        except Exception as e:
                            r.error = why_failed(e)
                    results.append(r)
                del calls
            del x, w, dy, ref
            torch.cuda.empty_cache()
    if decode:
        for n in DECODE_NS:
            for m in DECODE_MS:
                x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=gen)
                w = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=gen)
                dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=gen)
                for impl in users:
                    prog.step(f"decode bfloat16 {m}x{n} {impl.name}")
                    r = Result(impl.name, "bfloat16", n, m, "decode", path=impl.path)
                    try:
                        r.extra["us"] = graph_us(impl.setup(x, w, dy).forward)
                    except Exception as e:
                        r.error = why_failed(e)
                    results.append(r)


# ---- reports -----------------------------------------------------------------------------------


def _cell(r: Result | None, ceiling: float) -> str:
    if r is None:
        return "-"
    if r.error:
        return "wrong" if "max error" in r.error else "fails"
    return f"{r.gbps:.0f} ({r.gbps / ceiling:.2f})"


def _is_peer(name: str) -> bool:
    return name in PEERS


def markdown(results: list[Result], ceiling: float, header: str, not_run: list[str] | tuple[str, ...] = (),
             stopped: str = "") -> str:
    out = [header, "", f"Copy ceiling measured in this run: {ceiling:.0f} GB/s. Cells: GB/s (fraction of the ceiling); "
           "'vs best peer': the first implementation's GB/s over the best peer's of the same table at that shape; "
           "'of its operator': the users' path over the raw operator's GB/s, for the first implementation.", ""]
    if stopped:  # a run cut short: its tables are partial, and say so first
        out += [f"**Not complete:** {stopped}.", ""]
    if not_run:  # peers asked for that could not run here: said, not silently left out of the tables
        out += ["Peers not run: " + "; ".join(not_run) + ".", ""]
    by = {(r.path, r.impl, r.dtype, r.n, r.direction): r for r in results}
    for path in (USERS, OPERATORS):
        mine = [r for r in results if r.path == path and r.direction != "decode"]
        if not mine:
            continue
        names = list(dict.fromkeys(r.impl for r in mine))
        ours = [n for n in names if not _is_peer(n)]
        out += [f"## Through {PATH_TITLES[path]}", ""]
        for dname in dict.fromkeys(r.dtype for r in mine):
            for direction in ("forward", "backward"):
                rows = sorted({r.n for r in mine if r.dtype == dname and r.direction == direction})
                if not rows:
                    continue
                out.append(f"### {dname} {direction}, GB/s")
                cols = names + (["vs best peer"] if ours else [])
                of_op = path == USERS and ours and any(r.path == OPERATORS and r.impl == ours[0] for r in results)
                cols += ["of its operator"] if of_op else []
                out += ["| N | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
                for n in rows:
                    cells = [_cell(by.get((path, i, dname, n, direction)), ceiling) for i in names]
                    if ours:
                        first = by.get((path, ours[0], dname, n, direction))
                        peer = [by[k].gbps for k in ((path, p, dname, n, direction) for p in names if _is_peer(p))
                                if k in by and by[k].gbps]
                        cells.append(f"{first.gbps / max(peer):.2f}" if first and first.gbps and peer else "-")
                        if of_op:
                            op = by.get((OPERATORS, ours[0], dname, n, direction))
                            cells.append(f"{first.gbps / op.gbps:.2f}" if first and first.gbps and op and op.gbps
                                         else "-")
                    out.append(f"| {n} | " + " | ".join(cells) + " |")
                out.append("")
    dec = [r for r in results if r.direction == "decode"]
    if dec:
        names = list(dict.fromkeys(r.impl for r in dec))
        ours = [n for n in names if not _is_peer(n)]
        cols = names + (["vs best peer"] if ours else [])
        out += [f"### decode: bfloat16 forward through the users' path, microseconds per call (CUDA graph of "
                f"{GRAPH_CALLS} calls); 'vs best peer': the best peer's time over the first implementation's",
                "| M x N | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
        for n in DECODE_NS:
            for m in DECODE_MS:
                got = {r.impl: r for r in dec if r.n == n and r.m == m}
                if not got:
                    continue
                cells = ["-" if got.get(i) is None else ("fails" if got[i].error else f"{got[i].extra['us']:.2f}")
                         for i in names]
                if ours:
                    first = got.get(ours[0])
                    peer = [got[p].extra["us"] for p in names if _is_peer(p) and p in got and not got[p].error]
                    cells.append(f"{min(peer) / first.extra['us']:.2f}" if first and not first.error and peer else "-")
                out.append(f"| {m} x {n} | " + " | ".join(cells) + " |")
        out.append("")
    errs = [r for r in results if r.error]
    if errs:
        out.append("Not timed:")
        seen = set()
        for r in errs:
            key = (r.path, r.impl, r.dtype, r.n, r.error)
            if key not in seen:
                seen.add(key)
                where = "" if r.path == USERS else " (operator)"
                out.append(f"- {r.impl}{where} {r.dtype} N={r.n} {r.direction}: {r.error}")
    return "\n".join(out)


def plot(results: list[Result], ceiling: float, path: Path) -> str:
    """A PNG per dtype and direction through the users' path (GB/s against N, one line per
    implementation, the copy ceiling drawn); returns what was written, or why nothing was."""
    try:  # an optional dependency
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (f"no plot: matplotlib is not installed here (pip install matplotlib, then "
                f"{command()} bench --plot {path.with_suffix('.json')})")
    results = [r for r in results if r.path == USERS]  # what users get; the operators are in the tables
    groups = [(d, k) for d in dict.fromkeys(r.dtype for r in results if r.direction != "decode")
              for k in ("forward", "backward")]
    groups = [g for g in groups if any(r.dtype == g[0] and r.direction == g[1] for r in results)]
    if not groups:
        return "no plot: no forward or backward results"
    fig, axes = plt.subplots(len(groups), 1, figsize=(8, 3.6 * len(groups)), squeeze=False)
    for ax, (dname, direction) in zip(axes[:, 0], groups):
        for impl in dict.fromkeys(r.impl for r in results):
            pts = sorted((r.n, r.gbps) for r in results
                         if r.impl == impl and r.dtype == dname and r.direction == direction and r.gbps)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=impl)
        ax.axhline(ceiling, color="black", linestyle="--", linewidth=1, label=f"copy {ceiling:.0f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N (row length)")
        ax.set_ylabel("GB/s")
        ax.set_title(f"{dname} {direction}")
        ax.set_ylim(0, ceiling * 1.1)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"plot: {path}"


def save(results: list[Result], ceiling: float, meta: dict, out_dir: Path) -> tuple[Path, str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    data = {"meta": {**meta, "copy_gbps": ceiling}, "results": [r.__dict__ for r in results]}
    (out_dir / "bench.json").write_text(json.dumps(data, indent=1))
    title = f"## RMSNorm speed: {meta.get('device', '?')}, {meta.get('when', '')}, commit {meta.get('commit', '?')}"
    md = markdown(results, ceiling, title, meta.get("not_run", []), meta.get("stopped", ""))
    (out_dir / "bench.md").write_text(md + "\n")
    return out_dir / "bench.md", plot(results, ceiling, out_dir / "bench.png")


def load_json(path: Path) -> tuple[list[Result], float, dict]:
    data = json.loads(path.read_text())
    return [Result(**r) for r in data["results"]], data["meta"]["copy_gbps"], data["meta"]


