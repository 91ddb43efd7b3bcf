"""A property sheet for RMSNorm implementations: ``python -m harness sheet``.

One column a target (this project, source folders, modules, the ``peer:`` targets), one row a
property, measured in one run on one device:

  gate                 the gate's verdict (a run of its own, in a worker) and the laws that failed
  deterministic        three calls give bitwise the same y, grad_x and grad_weight
  batch invariant      a row's y, inv_rms and grad_x are bitwise the same alone and in batches of
                       1 to 2^17 rows (powers of two and their neighbours); else the first batch
                       size that differs
  layout invariant     a misaligned, padded or transposed x gives bitwise its contiguous copy's y
  inputs untouched     x, weight, grad_out and inv_rms keep their bytes through the calls
  accepted             dtypes, a float32 weight with 16-bit x, layouts, zero rows, the largest N
                       (powers of two), more than 2^31 elements (CUDA)
  accuracy             per dtype, the median and worst error of y and grad_x against float64, in
                       units of the dtype's rounding (2^-24 float32, 2^-11 float16, 2^-8 bfloat16,
                       2^-53 float64) of each row's largest value; eager PyTorch (peer:hf) is
                       always in the run for comparison

Everything but the gate runs in this process: a target that crashes the process ends the sheet
(the gate, in its worker, reports crashes). Output: markdown, JSON and a PNG of accuracy.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

from .build import ROOT

DTYPES = ("float32", "float16", "bfloat16", "float64")
TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
UNIT = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8, "float64": 2.0**-53}
LAYOUTS = ("transposed", "offset", "padded", "row_step")
EAGER = "peer:hf"
EPS = 1e-6


class _Fail(Exception):
    """A call that raised (refused or crashed), with its one-line reason."""


def _call(fn, *args):
    from .target import Crashed, LawFailure, Rejected

    try:
        return fn(*args)
    except (Rejected, Crashed, LawFailure) as e:
        raise _Fail(str(e).strip().splitlines()[0]) from None


def _same(a, b) -> bool:
    """Bitwise equal (both None counts as equal: a target without inv_rms)."""
    from .laws.common import _same_bits

    if a is None or b is None:
        return a is None and b is None
    return _same_bits(a, b)


def _inputs(rows, n, dtype, device, seed=0, wdtype=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, n, generator=g, dtype=torch.float64).to(dtype).to(device)
    w = (1 + 0.5 * torch.randn(n, generator=g, dtype=torch.float64)).to(wdtype or dtype).to(device)
    dy = torch.randn(rows, n, generator=g, dtype=torch.float64).to(dtype).to(device)
    return x, w, dy


def _fwd_bwd(t, x, w, dy):
    from .laws.common import inv_for_backward

    y, inv = _call(t.forward, x, w, EPS)
    gx = gw = None
    if t.has_backward:
        gx, gw = _call(t.backward, dy, x, w, inv_for_backward(x, EPS, inv))
    return y, inv, gx, gw


# ---- the properties ----------------------------------------------------------------------------

def deterministic(t, dtype) -> dict:
    x, w, dy = _inputs(1024, 1000, TORCH[dtype], t.device, seed=1)
    runs = [_fwd_bwd(t, x, w, dy) for _ in range(3)]
    names = ("y", "inv_rms", "grad_x", "grad_weight")
    bad = sorted({names[i] for r in runs[1:] for i in range(4) if not _same(runs[0][i], r[i])}, key=names.index)
    return {"ok": not bad, "text": "yes" if not bad else f"no: {', '.join(bad)} differ run to run ({dtype})"}


def batch_invariant(t, dtype) -> dict:
    from .laws.invariance import batch_variance

    for n in (64, 1000, 4096):
        w = _inputs(1, n, TORCH[dtype], t.device, seed=n)[1]
        try:
            why = batch_variance(t, n, TORCH[dtype], w, EPS, "normal", seed=n)
        except Exception as e:  # noqa: BLE001 - a refusal here is reported, not fatal
            return {"ok": None, "text": f"not measured: {str(e).splitlines()[0][:120]}"}
        if why:
            m = re.search(r"(\w+) of row (\d+) differs bitwise between .+? and a batch of (\d+) rows", why)
            short = f"no: from {m.group(3)} rows ({m.group(1)}, N = {n}, {dtype})" if m else f"no: {why}"
            return {"ok": False, "text": short, "detail": why}
    return {"ok": True, "text": f"yes (1 to 2^17 rows, N = 64, 1000, 4096; {dtype})"}


def layouts(t, dtype) -> tuple[dict, dict]:
    from .cases import place

    accepted, variant = [], []
    v = torch.randn(64, 1000, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(TORCH[dtype])
    w = _inputs(1, 1000, TORCH[dtype], t.device, seed=3)[1]
    yc, _ = _call(t.forward, v.to(t.device).contiguous(), w, EPS)
    for layout in LAYOUTS:
        x = place(v, layout, t.device, torch.Generator().manual_seed(4))
        try:
            y, _ = _call(t.forward, x, w, EPS)
        except _Fail:
            continue
        accepted.append(layout)
        if not _same(y.contiguous(), yc):
            variant.append(layout)
    refused = [lay for lay in LAYOUTS if lay not in accepted]
    text = "all" if not refused else f"{', '.join(accepted) or 'none'}; refused: {', '.join(refused)}"
    acc = {"ok": None, "text": text}
    inv = {"ok": not variant, "text": "yes" if not variant else f"no: {', '.join(variant)} differ from contiguous"}
    if not accepted:
        inv = {"ok": None, "text": "not measured (every layout refused)"}
    return acc, inv


def untouched(t, dtype) -> tuple[dict, dict]:
    from .laws.common import inv_for_backward

    x, w, dy = _inputs(16, 1000, TORCH[dtype], t.device, seed=5)
    before = {k: v.clone() for k, v in (("x", x), ("weight", w), ("grad_out", dy))}
    out = _call(t.call, "forward", t.module.forward, x, w, EPS)
    inv = out[1] if isinstance(out, (tuple, list)) and len(out) > 1 else None
    inv = inv_for_backward(x, EPS, inv)
    inv_before = inv.clone()
    if t.has_backward:
        _call(t.call, "backward", t.module.backward, dy, x, w, inv)
    changed = [k for k, v in before.items() if not _same({"x": x, "weight": w, "grad_out": dy}[k], v)]
    if not _same(inv, inv_before):
        changed.append("inv_rms")
    inputs = [c for c in changed if c != "grad_out"]
    return ({"ok": not inputs, "text": "yes" if not inputs else f"no: {', '.join(inputs)} changed"},
            {"ok": "grad_out" not in changed,
             "text": "yes" if "grad_out" not in changed else "no: backward writes into grad_out"})


def accepted_dtypes(t) -> tuple[dict, dict, list[str]]:
    ok = []
    for d in DTYPES:
        try:
            _fwd_bwd(t, *_inputs(8, 64, TORCH[d], t.device, seed=6))
            ok.append(d)
        except _Fail:
            pass
    mixed = []
    for d in ("float16", "bfloat16"):
        if d in ok:
            try:
                _fwd_bwd(t, *_inputs(8, 64, TORCH[d], t.device, seed=7, wdtype=torch.float32))
                mixed.append(d)
            except _Fail:
                pass
    refused = [d for d in DTYPES if d not in ok]
    text = ", ".join(ok) or "none"
    if refused:
        text += f"; refused: {', '.join(refused)}"
    half = [d for d in ("float16", "bfloat16") if d in ok]
    missing = [d for d in half if d not in mixed]
    mtext = ("n/a (no 16-bit dtype)" if not half else "yes" if not missing
             else f"{', '.join(mixed) or 'no'}; refused with {', '.join(missing)}")
    return {"ok": None, "text": text}, {"ok": None, "text": mtext}, ok


def zero_rows(t, dtype) -> dict:
    try:
        y, inv, gx, gw = _fwd_bwd(t, *_inputs(0, 64, TORCH[dtype], t.device))
    except _Fail as e:
        return {"ok": None, "text": f"refused ({str(e)[:80]})"}
    good = tuple(y.shape) == (0, 64) and (gw is None or bool((gw == 0).all()))
    return {"ok": good, "text": "yes" if good else "accepted, but grad_weight is not zero"}


def largest_n(t, dtype) -> dict:
    top = 20 if t.is_cuda else 18
    largest, refused = None, None
    for k in range(10, top + 1):
        n = 1 << k
        try:
            _fwd_bwd(t, *_inputs(1, n, TORCH[dtype], t.device, seed=k))
            largest = n
        except _Fail as e:
            refused = (n, str(e))
            break
    if refused is None:
        return {"ok": None, "text": f">= {largest} (tried up to 2^{top})", "value": largest}
    return {"ok": None, "text": f"{largest or '< 1024'}; {refused[0]} refused", "value": largest}


def beyond_2_31(t, dtype) -> dict:
    if not t.is_cuda:
        return {"ok": None, "text": "not tried on the CPU (three 4 GiB tensors)"}
    from .cases import Case
    from .laws.cuda import beyond_2_31_elements
    from .target import LawFailure, NotApplicable

    d = dtype if dtype in ("bfloat16", "float16") else "bfloat16"
    case = Case(shape=((1 << 31) // 4096 + 17, 4096), dtype=d, weight_dtype=d, eps=EPS, seed=11)
    try:
        beyond_2_31_elements(t, case)
    except NotApplicable as e:
        return {"ok": None, "text": f"not tried: {e}"}
    except LawFailure as e:
        return {"ok": False, "text": f"wrong: {str(e).splitlines()[0][:120]}"}
    except Exception as e:  # noqa: BLE001
        return {"ok": None, "text": f"refused: {str(e).splitlines()[0][:120]}"}
    return {"ok": True, "text": f"yes ({case.shape[0]} x 4096 {d})"}


def accuracy(t, dtype) -> dict:
    """Median and worst error of y and grad_x against float64, in units of the dtype's rounding
    of each row's largest value."""
    out = {}
    errs = {"y": [], "grad_x": []}
    for rows, n, seed in ((256, 4096, 21), (512, 1000, 22)):
        x, w, dy = _inputs(rows, n, TORCH[dtype], t.device, seed=seed)
        y, inv, gx, _ = _fwd_bwd(t, x, w, dy)
        x64, w64, dy64 = x.double().requires_grad_(), w.double(), dy.double()
        y64 = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + EPS) * w64
        (gx64,) = torch.autograd.grad(y64, (x64,), dy64)
        for name, got, ref in (("y", y, y64.detach()), ("grad_x", gx, gx64)):
            if got is None:
                continue
            scale = ref.abs().amax(-1, keepdim=True).clamp_min(1e-300) * UNIT[dtype]
            errs[name].append(((got.double() - ref).abs() / scale).flatten().cpu())
    for name, parts in errs.items():
        if parts:
            e = torch.cat(parts)
            out[name] = {"median": float(e.median()), "worst": float(e.max())}
    return out


# ---- the gate, in a process of its own ---------------------------------------------------------

def gate(spec: str, device: str, profile: str, budget: float, out_dir: Path) -> dict:
    junit = out_dir / f"gate-{re.sub(r'[^A-Za-z0-9_.-]', '_', spec)}.xml"
    cmd = [sys.executable, "-m", "harness", "gate", "--target", spec, "--device", device, "--profile", profile,
           "--budget", str(budget), "--junit", str(junit), "--corpus", str(out_dir / "corpus")]
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    secs = time.monotonic() - t0
    text = p.stdout + p.stderr
    laws = sorted(set(re.findall(r"^FAILED properties/\S+::test_(\w+)", text, re.M)))
    if p.returncode == 0:
        return {"ok": True, "text": f"passed ({profile}, {secs:.0f} s)"}
    if p.returncode == 1:
        return {"ok": False, "text": f"failed ({profile}): {', '.join(laws) or 'see the gate log'}", "laws": laws}
    last = next((l for l in reversed(text.strip().splitlines()) if l.strip()), "")
    return {"ok": None, "text": f"not judged (exit {p.returncode}): {last[:120]}"}


# ---- the run -----------------------------------------------------------------------------------

ROWS = ("gate", "deterministic", "batch invariant", "layout invariant", "inputs untouched", "grad_out untouched",
        "dtypes", "float32 weight, 16-bit x", "layouts", "zero rows", "largest N", "> 2^31 elements")


def measure(spec: str, device: str, *, with_gate: bool, gate_profile: str, budget: float, out_dir: Path,
            say=lambda s: None) -> dict:
    from .target import load, parse_spec

    col: dict = {"target": spec}
    try:
        t = load(parse_spec(spec), device, strict=False)
    except Exception as e:  # noqa: BLE001
        col["error"] = f"cannot load: {str(e).splitlines()[0]}"
        return col
    col["note"] = t.note
    say(f"{spec}: dtypes")
    col["dtypes"], col["float32 weight, 16-bit x"], ok = accepted_dtypes(t)
    if not ok:
        col["error"] = "refuses every dtype"
        return col
    main = "bfloat16" if "bfloat16" in ok else ok[0]
    for name, fn in (("deterministic", deterministic), ("batch invariant", batch_invariant)):
        say(f"{spec}: {name}")
        try:
            col[name] = fn(t, main)
        except _Fail as e:
            col[name] = {"ok": None, "text": f"not measured: {e}"}
    say(f"{spec}: layouts")
    col["layouts"], col["layout invariant"] = layouts(t, main)
    col["inputs untouched"], col["grad_out untouched"] = untouched(t, main)
    col["zero rows"] = zero_rows(t, main)
    say(f"{spec}: largest N")
    col["largest N"] = largest_n(t, main)
    say(f"{spec}: > 2^31 elements")
    col["> 2^31 elements"] = beyond_2_31(t, main)
    col["accuracy"] = {}
    for d in ok:
        say(f"{spec}: accuracy {d}")
        try:
            col["accuracy"][d] = accuracy(t, d)
        except _Fail as e:
            col["accuracy"][d] = {"error": str(e)}
    if with_gate:
        say(f"{spec}: the gate ({gate_profile})")
        col["gate"] = gate(spec, device, gate_profile, budget, out_dir)
    else:
        col["gate"] = {"ok": None, "text": "not run (--no-gate)"}
    return col


def markdown(cols: list[dict], meta: dict) -> str:
    names = [c["target"] + (" (eager)" if c["target"] == EAGER else "") for c in cols]
    lines = [f"## RMSNorm property sheet: {meta['device']}, commit {meta['commit']}, {meta['when']}", "",
             "| property | " + " | ".join(names) + " |", "|---" * (len(cols) + 1) + "|"]
    for row in ROWS:
        cells = []
        for c in cols:
            cell = c.get(row)
            cells.append(c.get("error", "-") if cell is None else cell["text"])
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    for d in DTYPES:
        for out in ("y", "grad_x"):
            cells, any_ = [], False
            for c in cols:
                a = c.get("accuracy", {}).get(d, {})
                if out in a:
                    any_ = True
                    cells.append(f"{a[out]['median']:.2f} / {a[out]['worst']:.2f}")
                else:
                    cells.append("refused" if d not in c.get("accuracy", {}) else a.get("error", "-")[:60])
            if any_:
                lines.append(f"| accuracy {d} {out}, median / worst | " + " | ".join(cells) + " |")
    lines += ["", "Accuracy: error against float64 in units of the dtype's rounding of each row's largest value "
              "(2^-24 float32, 2^-11 float16, 2^-8 bfloat16, 2^-53 float64), over 256 x 4096 and 512 x 1000 "
              "normal inputs (for float64 the reference is float64 too: differences in the order of operations, not "
              "errors). Bitwise properties are measured in the first dtype a target takes of bfloat16, float32, "
              "float16, float64."]
    return "\n".join(lines)


def plot(cols: list[dict], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed here (pip install matplotlib)"
    dts = [d for d in DTYPES if any("y" in c.get("accuracy", {}).get(d, {}) for c in cols)]
    if not dts:
        return "no plot: no accuracy measured"
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / max(1, len(cols))
    for ax, out in zip(axes, ("y", "grad_x")):
        for i, c in enumerate(cols):
            vals = [c.get("accuracy", {}).get(d, {}).get(out, {}).get("worst", float("nan")) for d in dts]
            ax.bar([k + i * width for k in range(len(dts))], vals, width, label=c["target"])
        ax.set_xticks([k + width * (len(cols) - 1) / 2 for k in range(len(dts))], dts)
        ax.set_yscale("log")
        ax.set_ylabel("worst error, units of the dtype's rounding")
        ax.set_title(f"{out} against float64")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"plot: {path}"


def main(targets: list[str], device: str, *, with_gate: bool, gate_profile: str, budget: float, out_dir: Path,
         commit: str) -> int:
    if EAGER not in targets:
        targets = targets + [EAGER]
    out_dir.mkdir(parents=True, exist_ok=True)
    cols = []
    t0 = time.monotonic()
    for i, spec in enumerate(targets):
        def say(s, i=i):
            print(f"sheet [{i + 1}/{len(targets)}] {time.monotonic() - t0:5.0f} s  {s}", file=sys.stderr, flush=True)

        cols.append(measure(spec, device, with_gate=with_gate, gate_profile=gate_profile, budget=budget,
                            out_dir=out_dir, say=say))
    meta = {"device": torch.cuda.get_device_name() if device == "cuda" else f"CPU ({device})", "commit": commit,
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__}
    (out_dir / "sheet.json").write_text(json.dumps({"meta": meta, "targets": cols}, indent=1, default=str))
    md = markdown(cols, meta)
    (out_dir / "sheet.md").write_text(md + "\n")
    print(md)
    print(f"sheet: {out_dir / 'sheet.md'}, {out_dir / 'sheet.json'}; {plot(cols, out_dir / 'sheet.png')}")
    return 0
