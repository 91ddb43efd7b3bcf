"""Nsight Compute on one shape, summarised: ``python -m harness profile``.

Runs one forward and one backward of the target (this project by default) on M x N inputs,
called as its users call it (harness.tools.bench's users' path: the module, backward through autograd),
under ``ncu`` (clocks left as the card has them), inside an NVTX range so that only the
target's kernels are profiled, and prints per kernel: time, DRAM throughput (percent of peak)
and bytes against the least the step must move, achieved and theoretical occupancy, registers
per thread, the launch (block, grid, cluster size, and the clusters the GPU holds at once), where
the grid ran (the multiprocessors' mean active share of the kernel's cycles, the fewest and most
CTAs a multiprocessor ran), local-memory (spill) traffic, and the three largest stall reasons. The
raw CSV is kept beside the summary.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

from rmsnorm._buildenv import ROOT
from harness.running.locations import command
import torch
from harness.tools.bench import DTYPES

RANGE = "rmsnorm_profile"
STALLS = ("long_scoreboard", "barrier", "lg_throttle", "membar", "short_scoreboard", "wait", "math_pipe_throttle",
          "not_selected", "selected", "mio_throttle", "drain", "dispatch_stall", "branch_resolving",
          "no_instruction", "imc_miss", "sleeping", "tex_throttle", "misc")
BASE = {
    "time_us": "gpu__time_duration.sum",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_read": "dram__bytes_read.sum",
    "dram_write": "dram__bytes_write.sum",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "theoretical_pct": "sm__maximum_warps_per_active_cycle_pct",
    "registers": "launch__registers_per_thread",
    "block": "launch__block_size",
    "grid": "launch__grid_size",
    "cluster": "launch__cluster_size",
    "local_ld": "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",
    "local_st": "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",
    # Where the grid ran: the multiprocessors' active cycles (their mean over the kernel's elapsed cycles), the CTAs
    # each ran (fewest, most), and the clusters the GPU holds at once (the occupancy calculator's, cluster launches).
    "sm_active": "sm__cycles_active.avg",
    "sm_elapsed": "sm__cycles_elapsed.max",
    "ctas_min": "sm__ctas_launched.min",
    "ctas_max": "sm__ctas_launched.max",
    "clusters_at_once": "launch__cluster_max_active",
}
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"

DRIVER = r'''
import sys, torch
sys.path.insert(0, {root!r})
from harness.tools import bench, bench_impls
m, n, dtype, target, direction = {m}, {n}, {dtype!r}, {target!r}, {direction!r}
peers = [target] if target in bench.PEERS else []
impls, skipped = bench_impls.implementations([] if peers else [target], peers)
if not impls:
    sys.exit("profile: " + "; ".join(skipped))
impl = impls[0]
g = torch.Generator(device="cuda").manual_seed(0)
dt = bench.DTYPES[dtype]
x = torch.randn(m, n, device="cuda", dtype=dt, generator=g)
w = (1 + 0.1 * torch.randn(n, device="cuda", generator=g)).to(dt)
dy = torch.randn(m, n, device="cuda", dtype=dt, generator=g)
# Autograd runs a CUDA backward on a thread of its own, outside this thread's NVTX range, and
# --direction backward then profiled no kernel at all: the backward runs on this thread instead.
torch.autograd.set_multithreading_enabled(False)
calls = impl.setup(x, w, dy)
calls.forward(); calls.backward(); torch.cuda.synchronize()
torch.cuda.nvtx.range_push({range!r})
if direction in ("forward", "both"):
    calls.forward()
if direction in ("backward", "both"):
    calls.backward()
torch.cuda.synchronize()
torch.cuda.nvtx.range_pop()
'''


def find_ncu() -> str | None:
    for cand in (shutil.which("ncu"), "/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu"):
        if cand and Path(cand).exists():
            return cand
    return None


def _num(v: str) -> float | None:
    try:
        return float(v.replace(",", ""))
    except (ValueError, AttributeError):
        return None


def parse(text: str) -> list[dict]:
    """Rows of ncu's --csv --page raw output (header, units, then one row per kernel)."""
    lines = [l for l in text.splitlines() if l.startswith('"')]
    if len(lines) < 3:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    head, units = rows[0], rows[1]
    out = []
    for r in rows[2:]:
        d = dict(zip(head, r))
        d["_units"] = dict(zip(head, units))
        out.append(d)
    return out


def short_name(name: str) -> str:
    """'void rmsnorm::rows::fwd_kernel<__nv_bfloat16, float, 4, 0>(...)' -> 'fwd_kernel<bf16,float,4,0>'."""
    n = name.replace("<unnamed>::", "").replace("(anonymous namespace)::", "")
    n = n[5:] if n.startswith("void ") else n
    depth, cut = 0, len(n)
    for i, ch in enumerate(n):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0:
            cut = i
            break
    n = n[:cut]
    base, _, targs = n.partition("<")
    base = base.split("::")[-1]
    targs = targs[:-1].replace("__nv_bfloat16", "bf16").replace("__half", "half").replace(" ", "") if targs else ""
    return f"{base}<{targs}>" if targs else base


def summarize(rows: list[dict], m: int, n: int, elem: int, direction: str) -> str:
    least = {"forward": 2 * m * n * elem, "backward": 3 * m * n * elem}
    out = [f"{'kernel':<44} {'us':>8} {'DRAM%':>6} {'MB moved':>9} {'occ%':>5} {'theo%':>5} {'regs':>4} "
           f"{'block':>5} {'grid':>7} {'clu':>3} {'at once':>7} {'SM act%':>7} {'CTAs/SM':>7} {'spill B':>7}  "
           "top stalls (per issue)"]
    total_us = 0.0
    for r in rows:
        short = short_name(r.get("Kernel Name", "?"))
        get = {k: _num(r.get(v, "")) for k, v in BASE.items()}
        t_unit = r["_units"].get(BASE["time_us"], "ns")
        t_us = (get["time_us"] or 0) * {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0,
                                        "ms": 1e3, "msecond": 1e3}.get(t_unit, 1e-3)
        total_us += t_us
        moved = ((get["dram_read"] or 0) + (get["dram_write"] or 0))
        unit = r["_units"].get(BASE["dram_read"], "byte")
        scale = {"byte": 1, "Kbyte": 1e3, "KB": 1e3, "Mbyte": 1e6, "MB": 1e6, "Gbyte": 1e9, "GB": 1e9}.get(unit, 1)
        moved_mb = moved * scale / 1e6
        stalls = sorted(((_num(r.get(STALL_METRIC.format(s), "")) or 0.0, s) for s in STALLS), reverse=True)[:3]
        spill = (get["local_ld"] or 0) + (get["local_st"] or 0)
        fmt = lambda v, f: ("-".rjust(int(f.split(".")[0])) if v is None else format(v, f))  # noqa: E731
        # clusters at once: only for cluster launches; SM active: the mean multiprocessor's share of the elapsed cycles
        at_once = get["clusters_at_once"] if (get["cluster"] or 0) > 0 else None
        active, elapsed, fewest, most = (get[k] for k in ("sm_active", "sm_elapsed", "ctas_min", "ctas_max"))
        sm_act = 100 * active / elapsed if active is not None and elapsed else None
        ctas = "-" if fewest is None or most is None else f"{fewest:.0f}-{most:.0f}"
        out.append(f"{short[:44]:<44} {t_us:8.1f} {fmt(get['dram_pct'], '6.1f')} {moved_mb:9.1f} "
                   f"{fmt(get['occupancy_pct'], '5.1f')} {fmt(get['theoretical_pct'], '5.1f')} "
                   f"{fmt(get['registers'], '4.0f')} {fmt(get['block'], '5.0f')} {fmt(get['grid'], '7.0f')} "
                   f"{fmt(get['cluster'], '3.0f')} {fmt(at_once, '7.0f')} {fmt(sm_act, '7.1f')} {ctas:>7} "
                   f"{spill:7.0f}  " + ", ".join(f"{s} {v:.1f}" for v, s in stalls))
    dirs = ("forward", "backward") if direction == "both" else (direction,)
    need = sum(least[d] for d in dirs)
    out.append(f"total {total_us:.1f} us over {len(rows)} kernel(s); the least the step{'s' if len(dirs) > 1 else ''} "
               f"must move: {need / 1e6:.1f} MB ({', '.join(dirs)}), "
               f"{need / (total_us * 1e-6) / 1e9 if total_us else 0:.0f} GB/s at that")
    return "\n".join(out)


def main(args) -> int:
    if not torch.cuda.is_available():
        print(f"{command()} profile: set-up error: profiling needs a CUDA GPU, and torch "
              f"{torch.__version__} sees none here", file=sys.stderr)
        return 2
    ncu = find_ncu()
    if ncu is None:
        print(f"{command()} profile: set-up error: Nsight Compute (ncu) was not found on PATH, "
              "/usr/local/cuda/bin or /opt/nvidia/nsight-compute", file=sys.stderr)
        return 2
    try:
        m_s, n_s = args.shape.lower().split("x")
        m, n = int(m_s), int(n_s)
        if m < 1 or n < 1:
            raise ValueError
    except ValueError:
        print(f"{command()} profile: --shape: expected MxN with positive integers (e.g. 16384x4096), "
              f"but got {args.shape!r}", file=sys.stderr)
        return 2

    if args.dtype not in DTYPES:
        print(f"{command()} profile: --dtype: expected one of {', '.join(DTYPES)}, but got {args.dtype!r}",
              file=sys.stderr)
        return 2
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    driver = out_dir / "profile_driver.py"
    driver.write_text(DRIVER.format(root=str(ROOT), m=m, n=n, dtype=args.dtype, target=args.target or "project",
                                    direction=args.direction, range=RANGE))
    metrics = ",".join(list(BASE.values()) + [STALL_METRIC.format(s) for s in STALLS])
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--nvtx", "--nvtx-include", f"{RANGE}/",
           "--csv", "--page", "raw", "--metrics", metrics, sys.executable, str(driver)]
    print(f"profile: {args.target or 'project'} {args.dtype} {m}x{n} {args.direction} under ncu ...", file=sys.stderr,
          flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    (out_dir / "ncu.csv").write_text(proc.stdout)
    (out_dir / "ncu.stderr").write_text(proc.stderr)
    rows = parse(proc.stdout)
    if proc.returncode != 0 or not rows:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        print(f"{command()} profile: ncu exited {proc.returncode} with {len(rows)} kernel(s) profiled:\n{tail}",
              file=sys.stderr)
        return 1
    elem = torch.empty((), dtype=DTYPES[args.dtype]).element_size()
    text = summarize(rows, m, n, elem, args.direction)
    (out_dir / "profile.txt").write_text(text + "\n")
    print(text)
    print(f"raw counters: {out_dir / 'ncu.csv'}")
    return 0
