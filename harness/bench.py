"""Speed of RMSNorm implementations on one GPU, side by side in one run: ``python -m harness bench``.

What is timed, per implementation, dtype and shape (M rows of N, M * N = 2^26 by default):
  forward   y (and the saved statistic where the implementation has one) from x and the weight
  backward  grad_x and grad_weight from grad_out, with what forward saved (autograd peers: the
            graph forward recorded, replayed by torch.autograd.grad)
Each figure is the median of CUDA-event timings with the L2 cache flushed before every call
(triton.testing.do_bench when Triton is installed, the same method otherwise). Bytes are the
least a kernel must move: forward reads x and writes y (2 M N elements), backward reads x and
grad_out and writes grad_x (3 M N); the weight and the statistic are left out. The copy ceiling
is a 1 GiB device-to-device copy timed in the same run (bytes read plus written).

Decode shapes (M = 1 ... 512 rows of N = 4096 and 8192, bfloat16, forward): one CUDA graph of
20 calls, replayed; microseconds per call.

Each implementation's outputs are checked against float64 before it is timed at a shape; one
that is wrong there is reported as wrong, not timed.

Implementations: ``project`` (this project's operators), any ``--target`` (a source folder or
module with forward/backward, as the gate takes it), and the peers: ``eager`` (Hugging Face's
LlamaRMSNorm in torch ops, autograd backward), ``native`` (F.rms_norm: the fused ATen
operators), ``compiled`` (torch.compile of eager, one compilation per shape), ``liger``
(Liger-Kernel's Triton kernels, in_place=False, when installed).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DEFAULT_NS = tuple(1 << k for k in range(9, 19))  # 512 ... 262144
DECODE_MS = (1, 8, 64, 512)
DECODE_NS = (4096, 8192)
PEERS = ("eager", "native", "compiled", "liger")
EPS = 1e-6
GRAPH_CALLS = 20


@dataclass
class Impl:
    name: str
    forward: Callable  # (x, w) -> outputs (y first)
    # (x, w, dy) -> a callable that runs one backward; prepared once per shape
    prepare_backward: Callable
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


# ---- implementations ---------------------------------------------------------------------------

def _eager(x, w, eps=EPS):
    from .peers import hf_rms_norm

    return hf_rms_norm(x, w, eps)


def _autograd_impl(name: str, fn: Callable, note: str = "") -> Impl:
    def prepare(x, w, dy):
        xg = x.detach().requires_grad_()
        wg = w.detach().requires_grad_()
        y = fn(xg, wg)
        if isinstance(y, (tuple, list)):
            y = y[0]
        return lambda: torch.autograd.grad(y, (xg, wg), dy, retain_graph=True)

    return Impl(name, lambda x, w: fn(x, w), prepare, note)


def _module_impl(name: str, module, note: str) -> Impl:
    """forward(x, w, eps) -> y or (y, inv_rms); backward(dy, x, w, inv_rms) -> (dx, dw)."""

    def fwd(x, w):
        return module.forward(x, w, EPS)

    def prepare(x, w, dy):
        out = module.forward(x, w, EPS)
        if isinstance(out, (tuple, list)) and len(out) > 1:
            inv = out[1]
        else:
            x64 = x.double()
            inv = torch.rsqrt((x64 * x64).mean(-1) + EPS).float()
        return lambda: module.backward(dy, x, w, inv)

    return Impl(name, fwd, prepare, note)


def _compiled() -> Impl:
    import torch._dynamo

    for knob in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 100_000)
    fn = torch.compile(_eager, dynamic=False)
    return _autograd_impl("compiled", fn, "torch.compile of eager, compiled for each shape")


def _native() -> Impl:
    def fwd(x, w):
        return torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], w, EPS)

    def prepare(x, w, dy):
        _, rstd = fwd(x, w)
        return lambda: torch.ops.aten._fused_rms_norm_backward(dy, x, [x.shape[-1]], rstd, w, [True, True])

    return Impl("native", fwd, prepare, "F.rms_norm's fused ATen operators")


def _liger() -> Impl | str:
    try:
        from liger_kernel.ops.rms_norm import (_str_to_casting_mode, calculate_settings, rms_norm_backward,
                                               rms_norm_forward)
    except ImportError as e:
        return f"Liger-Kernel is not installed ({e})"

    def fwd(x, w):
        return rms_norm_forward(x, w, EPS, 0.0, "llama", None)

    def prepare(x, w, dy):
        out = fwd(x, w)
        rstd = out[2]
        n = x.shape[-1]
        block, warps = calculate_settings(n)
        mode = _str_to_casting_mode["llama"]
        return lambda: rms_norm_backward(dy, x, w, rstd, 0.0, mode, block, warps, False, None)

    return Impl("liger", fwd, prepare, "Liger-Kernel, in_place=False")


def implementations(targets: list[str], peers: list[str]) -> tuple[list[Impl], list[str]]:
    """The implementations to time, and a line for each one that cannot run here."""
    impls, skipped = [], []
    for spec in targets:
        from . import target as tgt

        parsed = tgt.parse_spec(spec)
        if parsed == tgt.PROJECT:
            from . import ops

            ops.extension()
            impls.append(_module_impl("project", _ProjectOps(), "this project's operators"))
        else:
            t = tgt.load(parsed, "cuda", strict=False)
            impls.append(_module_impl(spec, t.module, t.note))
    for p in peers:
        if p == "eager":
            impls.append(_autograd_impl("eager", _eager, "Hugging Face LlamaRMSNorm, autograd"))
        elif p == "native":
            impls.append(_native())
        elif p == "compiled":
            impls.append(_compiled())
        elif p == "liger":
            got = _liger()
            (skipped.append(f"liger: {got}") if isinstance(got, str) else impls.append(got))
        else:
            raise ValueError(f"--peers: expected names from {', '.join(PEERS)}, but got {p!r}")
    return impls, skipped


class _ProjectOps:
    @staticmethod
    def forward(x, w, eps):
        return torch.ops.rmsnorm.forward(x, w, eps)

    @staticmethod
    def backward(dy, x, w, inv):
        return torch.ops.rmsnorm.backward(dy, x, w, inv)


# ---- timing ------------------------------------------------------------------------------------

def _flush_buffer() -> torch.Tensor:
    return torch.empty(256 << 20, dtype=torch.int8, device="cuda")


def time_ms(fn: Callable, *, warmup_ms: float = 25, rep_ms: float = 100) -> float:
    """Median milliseconds of fn, L2 flushed before each call."""
    try:
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
    for _ in range(n_warm):
        fn()
    times = []
    for _ in range(n_rep):
        cache.zero_()
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


def check(impl: Impl, x, w, dy, ref) -> str:
    """'' when impl's y, grad_x and grad_weight are near float64's, else what is wrong."""
    out = impl.forward(x, w)
    y = out[0] if isinstance(out, (tuple, list)) else out
    bad = []
    grads = impl.prepare_backward(x, w, dy)()
    for what, got, want in (("y", y, ref[0]), ("grad_x", grads[0], ref[1]), ("grad_weight", grads[1], ref[2])):
        err = _max_err(got, want)
        if not err <= _limit(x.dtype):
            bad.append(f"{what} max error {err:.3g} of the largest value")
    return "; ".join(bad)


# ---- the run -----------------------------------------------------------------------------------

class Progress:
    def __init__(self, total: int) -> None:
        self.total, self.done, self.t0 = total, 0, time.monotonic()
        self.tty = sys.stderr.isatty()

    def step(self, what: str) -> None:
        self.done += 1
        line = f"bench [{self.done}/{self.total}] {time.monotonic() - self.t0:5.0f} s  {what}"
        print(("\r" + line.ljust(100)) if self.tty else line, end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def run(impls: list[Impl], dtypes: list[str], ns: list[int], elements: int, decode: bool,
        directions: tuple[str, ...] = ("forward", "backward")) -> tuple[list[Result], float]:
    results: list[Result] = []
    ceiling = copy_ceiling_gbps()
    steps = len(dtypes) * len(ns) * len(impls) + (len(DECODE_MS) * len(DECODE_NS) * len(impls) if decode else 0)
    prog = Progress(steps)
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
                prog.step(f"{dname} {m}x{n} {impl.name}")
                try:
                    wrong = check(impl, x, w, dy, ref)
                except Exception as e:  # refusals and crashes are reported, not fatal
                    wrong = f"raised {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                for direction in directions:
                    r = Result(impl.name, dname, n, m, direction)
                    if wrong:
                        r.error = wrong
                    else:
                        try:
                            if direction == "forward":
                                fn = lambda: impl.forward(x, w)  # noqa: E731
                            else:
                                fn = impl.prepare_backward(x, w, dy)
                            r.ms = time_ms(fn)
                            r.gbps = (2 if direction == "forward" else 3) * m * n * s / (r.ms * 1e-3) / 1e9
                        except Exception as e:
                            r.error = f"raised {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                    results.append(r)
            del x, w, dy, ref
            torch.cuda.empty_cache()
    if decode:
        for n in DECODE_NS:
            for m in DECODE_MS:
                x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, generator=gen)
                w = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=gen)
                for impl in impls:
                    prog.step(f"decode bfloat16 {m}x{n} {impl.name}")
                    r = Result(impl.name, "bfloat16", n, m, "decode")
                    try:
                        r.extra["us"] = graph_us(lambda: impl.forward(x, w))
                    except Exception as e:
                        r.error = f"raised {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                    results.append(r)
    prog.close()
    return results, ceiling


# ---- reports -----------------------------------------------------------------------------------

def _cell(r: Result | None, ceiling: float) -> str:
    if r is None:
        return "-"
    if r.error:
        return "wrong" if "max error" in r.error else "fails"
    return f"{r.gbps:.0f} ({r.gbps / ceiling:.2f})"


def markdown(results: list[Result], ceiling: float, header: str) -> str:
    names = list(dict.fromkeys(r.impl for r in results))
    ours = [n for n in names if n not in PEERS]
    out = [header, "", f"Copy ceiling measured in this run: {ceiling:.0f} GB/s. Cells: GB/s (fraction of the ceiling); "
           "'vs best peer': the first implementation's GB/s over the best peer's at that shape.", ""]
    by = {(r.impl, r.dtype, r.n, r.direction): r for r in results}
    for dname in dict.fromkeys(r.dtype for r in results if r.direction != "decode"):
        for direction in ("forward", "backward"):
            rows = sorted({r.n for r in results if r.dtype == dname and r.direction == direction})
            if not rows:
                continue
            out.append(f"### {dname} {direction}, GB/s")
            cols = names + (["vs best peer"] if ours else [])
            out += ["| N | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
            for n in rows:
                cells = [_cell(by.get((i, dname, n, direction)), ceiling) for i in names]
                if ours:
                    mine = by.get((ours[0], dname, n, direction))
                    peer = [by[(p, dname, n, direction)].gbps for p in names if p in PEERS
                            and (p, dname, n, direction) in by and by[(p, dname, n, direction)].gbps]
                    cells.append(f"{mine.gbps / max(peer):.2f}" if mine and mine.gbps and peer else "-")
                out.append(f"| {n} | " + " | ".join(cells) + " |")
            out.append("")
    dec = [r for r in results if r.direction == "decode"]
    if dec:
        out += [f"### decode: bfloat16 forward, microseconds per call (CUDA graph of {GRAPH_CALLS} calls)",
                "| M x N | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for n in DECODE_NS:
            for m in DECODE_MS:
                cells = []
                for i in names:
                    r = next((r for r in dec if r.impl == i and r.n == n and r.m == m), None)
                    cells.append("-" if r is None else ("fails" if r.error else f"{r.extra['us']:.2f}"))
                out.append(f"| {m} x {n} | " + " | ".join(cells) + " |")
        out.append("")
    errs = [r for r in results if r.error]
    if errs:
        out.append("Not timed:")
        seen = set()
        for r in errs:
            key = (r.impl, r.dtype, r.n, r.error)
            if key not in seen:
                seen.add(key)
                out.append(f"- {r.impl} {r.dtype} N={r.n} {r.direction}: {r.error}")
    return "\n".join(out)


def plot(results: list[Result], ceiling: float, path: Path) -> str:
    """A PNG per dtype and direction (GB/s against N, one line per implementation, the copy
    ceiling drawn); returns what was written, or why nothing was."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (f"no plot: matplotlib is not installed here (pip install matplotlib, then "
                f"python3 -m harness bench --plot {path.with_suffix('.json')})")
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
    md = markdown(results, ceiling, title)
    (out_dir / "bench.md").write_text(md + "\n")
    return out_dir / "bench.md", plot(results, ceiling, out_dir / "bench.png")


def load_json(path: Path) -> tuple[list[Result], float, dict]:
    data = json.loads(path.read_text())
    return [Result(**r) for r in data["results"]], data["meta"]["copy_gbps"], data["meta"]
