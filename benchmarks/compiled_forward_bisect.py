"""Which trait of torch.compile's forward makes it fast: its forward (torch.compile of LlamaRMSNorm, as harness
bench's peer) beside Triton kernels rebuilt from it, from its own shape (two passes over x, the second from L2:
`reread`, 16 or 8 warps) to the project's (the row held in registers: `held`, 16, 8 or 4 warps), each with the
eviction policies of its loads of x switched (first pass / second pass; `-`: none), and this project's module.
Timed as harness bench times them (``harness.tools.bench.time_ms``: the same x every call, the L2 flushed by zeroing
256 MB before each), twice; each output checked against a float64 reference first. Fractions of the copy ceiling.
A script, not a test; its output (on the kernels before e839fd8) is in benchmarks/results/h200/profile-h200.md.

  python3 benchmarks/compiled_forward_bisect.py      (a CUDA GPU, Triton)
"""
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.tools.bench import time_ms, copy_ceiling_gbps, _compiled_module, _project_module  # noqa: E402


@triton.jit
def reread(X, W, Y, eps, N: tl.constexpr, BLOCK: tl.constexpr, EV1: tl.constexpr, EV2: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    xp = X + row * N
    yp = Y + row * N
    acc = tl.zeros([BLOCK], tl.float32)
    for off in tl.static_range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(xp + cols, eviction_policy=EV1).to(tl.float32)
        acc += x * x
    inv = tl.rsqrt(tl.sum(acc, 0) / N + eps)
    for off in tl.static_range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        w = tl.load(W + cols, eviction_policy="evict_last").to(tl.float32)
        x = tl.load(xp + cols, eviction_policy=EV2).to(tl.float32)
        tl.store(yp + cols, (x * inv * w).to(Y.dtype.element_ty))


@triton.jit
def held(X, W, Y, eps, N: tl.constexpr, EV1: tl.constexpr, WLATE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, N)
    x = tl.load(X + row * N + cols, eviction_policy=EV1).to(tl.float32)
    if WLATE:
        inv = tl.rsqrt(tl.sum(x * x, 0) / N + eps)
        w = tl.load(W + cols).to(tl.float32)
    else:
        w = tl.load(W + cols).to(tl.float32)
        inv = tl.rsqrt(tl.sum(x * x, 0) / N + eps)
    tl.store(Y + row * N + cols, (x * inv * w).to(Y.dtype.element_ty))


def main():
    torch.manual_seed(0)
    ceiling = copy_ceiling_gbps()
    print(f"copy ceiling {ceiling:.0f} GB/s", flush=True)
    shapes = [(16384, 4096, torch.float32), (4096, 16384, torch.float32), (16384, 4096, torch.bfloat16)]
    for m, n, dt in shapes:
        x = torch.randn(m, n, device="cuda", dtype=dt)
        w = torch.randn(n, device="cuda", dtype=dt)
        y = torch.empty_like(x)
        ref = (x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * w.double())
        gb = 2 * x.numel() * x.element_size() / 1e9
        cands = {}
        mod, mw = _compiled_module(n, dt)
        with torch.no_grad():
            mw.copy_(w)
        cands["torch.compile module"] = lambda: mod(x)
        pm, pw = _project_module(n, dt)
        with torch.no_grad():
            pw.copy_(w)
        cands["project module"] = lambda: pm(x)
        bl = 2048 if dt == torch.float32 else 4096
        rr = [(16, "evict_last", "evict_first"), (16, "", ""), (16, "evict_last", ""), (16, "", "evict_first"),
              (8, "evict_last", "evict_first"), (8, "", "")]
        for warps, ev1, ev2 in rr:
            cands[f"reread w{warps} B{bl} {ev1 or '-'}/{ev2 or '-'}"] = (
                lambda warps=warps, ev1=ev1, ev2=ev2: reread[(m,)](x, w, y, 1e-6, N=n, BLOCK=min(bl, n), EV1=ev1,
                                                                 EV2=ev2, num_warps=warps))
        hd = [(16, "", False), (16, "", True), (16, "evict_last", False), (16, "evict_first", False), (8, "", False),
              (8, "", True), (4, "", False)]
        for warps, ev1, wl in hd:
            if n > 8192 and warps < 16:
                continue
            cands[f"held w{warps} {ev1 or '-'} w{'late' if wl else 'early'}"] = (
                lambda warps=warps, ev1=ev1, wl=wl: held[(m,)](x, w, y, 1e-6, N=n, EV1=ev1, WLATE=wl,
                                                             num_warps=warps))
        print(f"\n## {dt} {m}x{n}", flush=True)
        for name, fn in cands.items():
            try:
                with torch.no_grad():
                    out = fn()
                    out = out if isinstance(out, torch.Tensor) else y
                    torch.cuda.synchronize()
                    err = (out.double() - ref).abs().max().item()
                    ms = time_ms(fn)
                    ms2 = time_ms(fn)
                print(f"{name:45s} {gb / (ms * 1e-3):7.0f} GB/s {gb / (ms * 1e-3) / ceiling:.3f}"
                      f"  (again {gb / (ms2 * 1e-3) / ceiling:.3f})  err {err:.2e}", flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"{name:45s} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
            y.zero_()


if __name__ == "__main__":
    main()
