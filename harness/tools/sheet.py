"""A property sheet for RMSNorm implementations: ``python -m harness sheet``.

One column a target (this project, source folders, modules, the ``peer:`` targets), one row a
property. The sheet judges nothing of its own: each column is one run of the gate on its target
(every law, deterministic and batch_invariant required of every target so that both are shown),
and each row is read from that run's report (``gate --report-json``):

  form                 the RMSNorm the target is, from its contract's variant keys (a fused residual
                       add and its sum, (1 + w), no weight, the rounding order; the card's form when
                       none), and whether the target declared it
  gate                 the gate's verdict as it stands for the target (the bitwise laws count only
                       where they are required of it by default: this project), the laws that failed
  deterministic        law deterministic: the same call twice gives bitwise the same outputs
  batch invariant      law batch_invariant: a row's bits alone and in batches of 1 to 2^17 rows
  layout invariant     law strided_equals_contiguous: a strided or misaligned x gives its
                       contiguous copy's result
  inputs untouched     law inputs_unchanged: x, weight, grad_out and inv_rms keep their bytes
  outputs kept         law outputs_kept: two calls interleaved, as two layers make them, each right, and
                       neither writing into what the other returned
  dtypes, float32 weight with 16-bit x, layouts, zero rows
                       what the target accepted and refused among the cases the laws drew (and
                       what its declared contract leaves out)
  largest N            the longest row among the cases it accepted
  > 2^31 elements      law beyond_2_31_elements (CUDA)
  accuracy             per dtype, the median and worst over the passing cases of ordinary values
                       (normal or uniform x, normal grad_out) of each case's worst error against
                       float64, in units of the dtype's rounding (2^-24 float32, 2^-11 float16,
                       2^-8 bfloat16, 2^-53 float64) of each row's largest value (for grad_x, of
                       its leading term |grad_out * weight| * inv_rms); eager PyTorch
                       (peer:hf) is always in the run for comparison

The columns' gates run side by side (each in its own processes: a target that crashes is
restarted by its worker and the crash is its gate's failure). Output: markdown, JSON and a PNG
of accuracy.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from harness.judging.laws.registry import required
from harness.judging.variant import Variant
from harness.running.worker import SHARERS_ENV
from harness.running.gpus import default_processes
from harness.running.spec import TargetSpec
import torch

DTYPES = ("float32", "float16", "bfloat16", "float64")
HALF = ("float16", "bfloat16")
EAGER = "peer:hf"
REQUIRE = "deterministic,batch-invariant"

ROWS = ("form", "gate", "deterministic", "batch invariant", "layout invariant", "inputs untouched", "outputs kept", "dtypes",
        "float32 weight, 16-bit x", "layouts", "zero rows", "largest N", "> 2^31 elements")
LAW_ROWS = {"deterministic": "deterministic", "batch invariant": "batch_invariant",
            "layout invariant": "strided_equals_contiguous", "inputs untouched": "inputs_unchanged",
            "outputs kept": "outputs_kept", "> 2^31 elements": "beyond_2_31_elements"}


def _slug(spec: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", spec)


def gate_command(spec: str, device: str, profile: str, budget: float, out_dir: Path) -> list[str]:
    return [sys.executable, "-m", "harness", "gate", "--target", spec, "--device", device, "--profile", profile,
            "--budget", str(budget), "--require", REQUIRE, "-n", "0",
            "--junit", str(out_dir / f"gate-{_slug(spec)}.xml"),
            "--report-json", str(out_dir / f"gate-{_slug(spec)}.json"),
            "--corpus", str(out_dir / "corpus")]


# ---- rows, read from a gate's report ------------------------------------------------------------


def _first_line(message: str) -> str:
    line = next((l.strip() for l in message.splitlines() if l.strip()), "")
    return line if len(line) <= 160 else line[:157] + "..."


def law_row(report: dict, law: str, yes: str = "yes") -> dict:
    """A law's verdict in one cell: no (its first failure, shrunk), yes (cases checked), or why
    it did not judge."""
    tally = report["tally"]
    fails = [f for f in tally.get("failures", []) if f["law"] == law]
    if fails:
        f = fails[-1]
        kind = "" if f["status"] == "fail" else f"{f['status']}: "
        return {"ok": False, "text": f"no: {kind}{_first_line(f['message'])}", "law": law}
    counts = tally.get("by_law", {}).get(law, {})
    if counts.get("pass"):
        return {"ok": True, "text": f"{yes} ({counts['pass']} cases)", "law": law}
    why = next((n["why"] for n in report.get("not_run", []) if n["test"] == f"test_{law}"), None)
    if why:
        return {"ok": None, "text": f"not run: {why.split(': ', 1)[-1]}", "law": law}
    if counts.get("rejected"):
        return {"ok": None, "text": f"not judged: the target refused all {counts['rejected']} cases", "law": law}
    return {"ok": None, "text": "not judged: no case ran", "law": law}


def _category(tally: dict, key: str) -> tuple[list[str], list[str]]:
    """Values of a case category the target accepted at least once, and those it always refused."""
    seen = tally.get("seen_by_cat", {}).get(key, {})
    rejected = tally.get("rejected_by_cat", {}).get(key, {})
    accepted = [v for v, n in seen.items() if n > rejected.get(v, 0)]
    refused = [v for v, n in seen.items() if n and n == rejected.get(v, 0)]
    return accepted, refused


def _ordered(values, order) -> list[str]:
    return sorted(values, key=lambda v: (order.index(v) if v in order else len(order), v))


def dtypes_row(report: dict) -> dict:
    accepted, refused = _category(report["tally"], "dtype")
    accepted, refused = _ordered(accepted, DTYPES), _ordered(refused, DTYPES)
    outside = [d for d in DTYPES if d not in report.get("contract", {}).get("dtypes", DTYPES)]
    text = ", ".join(accepted) or "none accepted"
    if refused:
        text += f"; refused: {', '.join(refused)}"
    if outside:
        text += f"; outside its declared contract: {', '.join(outside)}"
    return {"ok": bool(accepted), "text": text}


def weight_row(report: dict) -> dict:
    tally = report["tally"]
    took = sum(1 for cats, _ in tally.get("accepted", []) if cats["dtype"] in HALF and cats["weight"] == "float32")
    refused = sum(1 for _, cats, _ in tally.get("refusals", []) if cats["dtype"] in HALF and cats["weight"] == "float32")
    if took:
        return {"ok": True, "text": f"yes ({took} cases)" + (f", {refused} refused" if refused else "")}
    if refused:
        return {"ok": False, "text": f"refused ({refused} cases)"}
    if "float32" not in report.get("contract", {}).get("weight_dtypes", ["float32"]):
        return {"ok": None, "text": "outside its declared contract"}
    return {"ok": None, "text": "not drawn"}


def layouts_row(report: dict) -> dict:
    accepted, refused = _category(report["tally"], "layout")
    text = ", ".join(sorted(accepted)) or "none accepted"
    if refused:
        text += f"; refused: {', '.join(sorted(refused))}"
    return {"ok": bool(accepted), "text": text}


def zero_rows_row(report: dict) -> dict:
    tally = report["tally"]
    seen = tally.get("seen_by_cat", {}).get("rows", {}).get("0", 0)
    rejected = tally.get("rejected_by_cat", {}).get("rows", {}).get("0", 0)
    if seen > rejected:
        return {"ok": True, "text": f"yes ({seen - rejected} cases)"}
    if seen:
        return {"ok": False, "text": f"refused ({seen} cases)"}
    if not report.get("contract", {}).get("zero_rows", True):
        return {"ok": None, "text": "outside its declared contract"}
    return {"ok": None, "text": "not drawn"}


def largest_n_row(report: dict) -> dict:
    ns = [n for _, n in report["tally"].get("accepted", [])]
    if not ns:
        return {"ok": None, "text": "no case accepted"}
    text = f"{max(ns)} (the longest row it was judged on)"
    c = report.get("contract", {})
    limits = ([f"N <= {c['max_n']}"] if c.get("max_n") else []) + \
             ([f"rows <= {c['max_row_bytes']} bytes"] if c.get("max_row_bytes") else [])
    if limits:
        text += f"; declared: {', '.join(limits)}"
    return {"ok": True, "text": text, "n": max(ns)}


def accuracy(report: dict) -> dict:
    out: dict = {}
    for dt, outs in report["tally"].get("errors", {}).items():
        worst = report["tally"].get("worst_error", {})
        out[dt] = {o: {"median": statistics.median(v), "worst": max(v), "cases": len(v),
                       "worst_at": worst.get(f"{dt} {o}", [None, "", ""])[1:]} for o, v in outs.items() if v}
    return out


def form_row(report: dict) -> dict:
    """The RMSNorm the target is: its contract's variant keys (the card's form when none), and whether the
    target declared them."""
    contract = report.get("contract") or {}
    v = contract.get("variant")
    if not isinstance(v, dict):
        return {"ok": None, "text": f"not known ({contract.get('error', 'no contract in the report')})"}
    fields = {f.name for f in dataclasses.fields(Variant)}
    variant = Variant(**{k: val for k, val in v.items() if k in fields})
    said = "declared" if contract.get("declared") else "not declared"
    return {"ok": None, "text": f"{variant.describe()} ({said})", "keys": variant.to_dict()}


def gate_row(report: dict, code: int, profile: str, seconds: float, spec: str) -> dict:
    held = required(TargetSpec.parse(spec))  # the optional laws this target is held to by default
    optional = {"deterministic", "batch_invariant"}
    failed = sorted({f["law"] for f in report["tally"].get("failures", []) if f["law"] not in optional - held})
    if failed:
        return {"ok": False, "text": f"failed ({profile}): {', '.join(failed)}", "laws": failed}
    if report.get("coverage"):
        return {"ok": False, "text": f"failed on coverage ({profile}): {'; '.join(report['coverage'])}"}
    if code == 130:
        return {"ok": None, "text": "interrupted"}
    return {"ok": True, "text": f"passed ({profile}, {seconds:.0f} s)"}


def column(spec: str, report: dict | None, code: int, text: str, profile: str, seconds: float) -> dict:
    col: dict = {"target": spec, "seconds": round(seconds, 1)}
    if report is None:
        last = next((l for l in reversed(text.strip().splitlines()) if l.strip()), "")
        col["error"] = f"not judged (gate exit {code}): {last[:160]}"
        col["gate"] = {"ok": None, "text": col["error"]}
        return col
    col["form"] = form_row(report)
    col["gate"] = gate_row(report, code, profile, seconds, spec)
    for row, law in LAW_ROWS.items():
        col[row] = law_row(report, law)
    col["dtypes"] = dtypes_row(report)
    col["float32 weight, 16-bit x"] = weight_row(report)
    col["layouts"] = layouts_row(report)
    col["zero rows"] = zero_rows_row(report)
    col["largest N"] = largest_n_row(report)
    col["accuracy"] = accuracy(report)
    return col


# ---- the run -----------------------------------------------------------------------------------


def run_columns(targets: list[str], device: str, profile: str, budget: float, out_dir: Path,
                side_by_side: int) -> list[dict]:
    """Each target's gate in a process of its own, side_by_side at a time; a line as each ends."""
    t0 = time.monotonic()
    # The gates side by side share the cores (session.cpu_threads), as a fuzz campaign's workers do:
    # each with a thread per core, two on the 2-core CI machine took 244 s for a target whose gate
    # alone takes 44 s.
    env = dict(os.environ)
    if side_by_side > 1:
        env[SHARERS_ENV] = str(side_by_side)
    pending = list(enumerate(targets))
    running: dict = {}
    done: dict[int, dict] = {}
    logs = {}
    try:
        while pending or running:
            while pending and len(running) < side_by_side:
                i, spec = pending.pop(0)
                log = (out_dir / f"gate-{_slug(spec)}.log").open("w")
                logs[i] = log
                report = out_dir / f"gate-{_slug(spec)}.json"
                report.unlink(missing_ok=True)
                proc = subprocess.Popen(gate_command(spec, device, profile, budget, out_dir), stdout=log,
                                        stderr=subprocess.STDOUT, text=True, env=env)
                running[i] = (spec, proc, time.monotonic(), report)
                print(f"sheet {time.monotonic() - t0:5.0f} s  started the gate on {spec}", file=sys.stderr, flush=True)
            time.sleep(0.2)
            for i, (spec, proc, started, report) in list(running.items()):
                code = proc.poll()
                if code is None:
                    continue
                del running[i]
                logs[i].close()
                secs = time.monotonic() - started
                text = (out_dir / f"gate-{_slug(spec)}.log").read_text()
                doc = json.loads(report.read_text()) if report.is_file() else None
                done[i] = column(spec, doc, code, text, profile, secs)
                print(f"sheet {time.monotonic() - t0:5.0f} s  {spec}: {done[i]['gate']['text']}", file=sys.stderr,
                      flush=True)
    finally:
        for spec, proc, _, _ in running.values():  # interrupted: no gate is left running
            proc.terminate()
        for spec, proc, _, _ in running.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in logs.values():
            log.close()
    return [done[i] for i in range(len(targets))]


def markdown(cols: list[dict], meta: dict) -> str:
    names = [c["target"] + (" (eager)" if c["target"] == EAGER else "") for c in cols]
    lines = [f"## RMSNorm property sheet: {meta['device']}, commit {meta['commit']}, {meta['when']}", "",
             "| property | " + " | ".join(names) + " |", "|---" * (len(cols) + 1) + "|"]
    for row in ROWS:
        cells = []
        for c in cols:
            cell = c.get(row)
            cells.append(c.get("error", "-") if cell is None else cell["text"].replace("|", "/"))
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
                    cells.append("-")
            if any_:
                lines.append(f"| accuracy {d} {out}, median / worst | " + " | ".join(cells) + " |")
    lines += ["", f"Each column is one run of the gate (profile {meta['profile']}, --require {REQUIRE}) on its target; "
              "each row is read from that run's report. Accuracy: over the cases of that run that passed with "
              "ordinary values (normal or uniform x, normal grad_out; the adversarial patterns are judged by the "
              "laws, but an error relative to a row's largest value there measures the input), each "
              "case's worst error against float64 in units of the dtype's rounding (2^-24 float32, 2^-11 float16, "
              "2^-8 bfloat16, 2^-53 float64) of each row's largest value (grad_x: of each row's largest "
              "|grad_out * weight| * inv_rms); the median and the worst of those."]
    return "\n".join(lines)


def plot(cols: list[dict], path: Path) -> str:
    try:  # an optional dependency
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


def main(targets: list[str], device: str, *, gate_profile: str, budget: float, out_dir: Path, commit: str,
         side_by_side: int | None = None) -> int:
    if EAGER not in targets:
        targets = targets + [EAGER]
    out_dir.mkdir(parents=True, exist_ok=True)
    if side_by_side is None:
        side_by_side = max(2, default_processes(device))
    side_by_side = max(1, min(side_by_side, len(targets)))
    cols = run_columns(targets, device, gate_profile, budget, out_dir, side_by_side)
    if device == "cuda":
        name = torch.cuda.get_device_name()
    else:
        name = f"CPU ({os.cpu_count()} cores)"
    meta = {"device": name, "commit": commit, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "profile": gate_profile, "side_by_side": side_by_side}
    (out_dir / "sheet.json").write_text(json.dumps({"meta": meta, "targets": cols}, indent=1, default=str))
    md = markdown(cols, meta)
    (out_dir / "sheet.md").write_text(md + "\n")
    print(md)
    print(f"sheet: {out_dir / 'sheet.md'}, {out_dir / 'sheet.json'}; {plot(cols, out_dir / 'sheet.png')}")
    judged = [c for c in cols if "error" not in c]
    return 0 if len(judged) == len(cols) else 2


