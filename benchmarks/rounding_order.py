"""Rounding orders of 16-bit RMSNorm outputs: how far correct kernels of each order land from the
eager emulation of the order they declare (a law of the declared order must pass them), and how far
kernels of the other orders and of the other fused-add sum land from it (the law must catch those).

The kernels are benchmarks/rounding_order_peers.py (written apart from the emulation, reducing in other
orders); the emulations, distances and diagnosis are harness/judging/order.py. Inputs are drawn as the
gate draws them (harness.cases.values: normal with per-row scales, huge, tiny), rows x N from 1 x 1 to
256 x 8192, float16 and bfloat16, weights in x's dtype or float32, N(1, 0.1), N(0, 1) or ones, eps in
{1e-6, 1e-5, 0.1}, with and without a residual (in x's dtype or float32), weight offset 0 or 1, and
some cases without a weight. Prints the tables; the last lines say how it was run.

    python3 benchmarks/rounding_order.py --seed 1 --cases 800
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT))

from harness.judging.cases import values  # noqa: E402  (the gate's own value patterns)
from harness.judging.order import ORDERS, emulate, order_distance, order_window, window_misses  # noqa: E402
from benchmarks.rounding_order_peers import PEERS  # noqa: E402

DTYPES = (torch.float16, torch.bfloat16)
SHORT = {"cast_then_multiply": "ctm", "multiply_in_float32": "mf32", "all_in_dtype": "aid",
         torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}
# Cases at least this large have their fraction off judged; smaller ones are read as counts.
BIG = 4096
NUMEL_BINS = ((1, 15), (16, 255), (256, 4095), (4096, 65535), (65536, 1 << 22))
# The windows' room for a kernel's own float32 arithmetic, in float32 ulps (relative 2^-24 each).
WINDOW_ULPS = (4, 64, 256, 1024)


def draw_case(rng: np.random.Generator, i: int, seed: int) -> dict:
    dtype = DTYPES[i % 2]
    u = rng.random()
    if u < 0.04:
        rows, n = 256, int(rng.choice([8192, 8191]))
    elif u < 0.07:
        rows, n = 1, int(rng.choice([1, 2, 3]))
    else:
        rows = int(round(math.exp(rng.uniform(0, math.log(256)))))
        n = int(round(math.exp(rng.uniform(0, math.log(8192)))))
        if n % 2 != int(rng.integers(2)):  # odd and even N alike
            n = n + 1 if n < 8192 else n - 1
    has_weight = rng.random() >= 0.1
    return dict(
        index=i, dtype=dtype, rows=rows, n=n,
        pattern=str(rng.choice(["normal", "huge", "tiny"], p=[0.7, 0.15, 0.15])),
        wdtype=torch.float32 if rng.random() < 0.5 else dtype,
        has_weight=has_weight,
        wpat=str(rng.choice(["n1", "n01", "ones"], p=[0.45, 0.45, 0.10])) if has_weight else "none",
        offset=1.0 if has_weight and rng.random() < 0.2 else 0.0,
        eps=float(rng.choice([1e-6, 1e-5, 0.1])),
        residual=str(rng.choice(["none", "same", "float32"], p=[0.5, 0.4, 0.1])),
        gen_seed=seed * 1_000_003 + i,
    )


def tensors(c: dict):
    gen = torch.Generator().manual_seed(c["gen_seed"])
    shape, dt = (c["rows"], c["n"]), c["dtype"]
    x = values(c["pattern"], shape, dt, gen).to(dt)
    w = None
    if c["has_weight"]:
        z = torch.randn(c["n"], generator=gen, dtype=torch.float64)
        w = {"n1": 1 + 0.1 * z, "n01": z, "ones": torch.ones_like(z)}[c["wpat"]].to(c["wdtype"])
    r = None
    if c["residual"] != "none":
        r = values(c["pattern"], shape, dt, gen).to(dt if c["residual"] == "same" else torch.float32)
    return x, w, r


def run_case(c: dict, recs: list, emu_pairs: list, resid_bad: list, win_pairs: list) -> None:
    x, w, r = tensors(c)
    dt, numel = c["dtype"], x.numel()
    kw = dict(weight_offset=c["offset"], residual=r, has_weight=c["has_weight"])
    # Without a residual the sum choice computes nothing: one emulation per order, keyed "none".
    sums = ("float32", "stored") if r is not None else ("float32",)
    emus = {}
    for order in ORDERS:
        for s in sums:
            try:
                emus[(order, s if r is not None else "none")] = emulate(x, w, c["eps"], order=order, sum_in=s, **kw)
            except ValueError:
                pass  # all_in_dtype has only the stored sum (Liger's fused add)
    rels = [u * 2.0**-24 for u in WINDOW_ULPS]
    windows = {}
    for key in emus:
        if key[0] != "all_in_dtype":
            windows[key] = order_window(x, w, c["eps"], order=key[0], rel=rels,
                                        sum_in=key[1] if key[1] != "none" else "float32", **kw)
    # How many elements of another emulation fall outside a declared window: what an exact kernel of that
    # other order or sum would be caught by.
    for kd in windows:
        for ko in emus:
            if ko != kd:
                win_pairs.append((c, kd, ko, numel, [window_misses(emus[ko][0], wd) for wd in windows[kd]]))
    keys = list(emus)
    for a in range(len(keys)):
        for b in range(a + 1, len(keys)):
            d = order_distance(emus[keys[a]][0], emus[keys[b]][0], dt)
            emu_pairs.append((c, keys[a], keys[b], numel, d["differ"]))
    for name, (fn, order, peer_sums) in PEERS.items():
        for s in peer_sums:
            if r is None and s != peer_sums[0]:
                continue  # without a residual the sum choice computes nothing
            if r is not None and order == "all_in_dtype" and c["residual"] != "same":
                continue  # Liger's fused add keeps the residual in x's dtype
            y, res = fn(x, w, c["eps"], sum_in=s, residual_dtype=None, **kw)
            own_sum = s if r is not None else "none"
            if res is not None and not torch.equal(res, emus[(order, own_sum)][1]):
                resid_bad.append((c, name, s, int((res != emus[(order, own_sum)][1]).sum())))
            dists = {}
            for key, (ye, _) in emus.items():
                dists[key] = order_distance(y, ye, dt)
            # Window misses against the declared ctm / mf32 windows of its own sum and of its own order.
            wm = {kd: [window_misses(y, wd) for wd in windows[kd]] for kd in windows
                  if kd[1] == own_sum or kd[0] == order}
            recs.append((c, name, order, own_sum, numel, dists, wm))


def fmt_frac(off: int, total: int) -> str:
    if total == 0:
        return "-"
    if off == 0:
        return "0"
    return f"{off / total:.2e} (1 in {total / off:,.0f})" if off / total < 0.01 else f"{100 * off / total:.1f}%"


def table(header: list[str], rows: list[list]) -> str:
    cols = [header] + [[str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
    lines = ["  ".join(v.ljust(widths[i]) if i == 0 else v.rjust(widths[i]) for i, v in enumerate(r)) for r in cols]
    return "\n".join(lines)


def wcond(c: dict) -> str:
    if not c["has_weight"]:
        return "no weight"
    return f"w {SHORT[c['wdtype']] if c['wdtype'] == torch.float32 else 'same'} {c['wpat']}" + \
        (" +1" if c["offset"] else "")


def law_passes(d: dict, frac: float, count: int, ulps: int) -> bool:
    return d["worst"] <= ulps and d["differ"] <= max(count, math.floor(frac * d["elements"]))


def report(recs, emu_pairs, resid_bad, win_pairs, args, wall) -> None:
    out = print
    # ---- 1. false-alarm side: each peer against its own order's emulation (its own sum) ----
    out("== 1. Correct kernels against the emulation of their own order and sum (the false-alarm side)")
    out("   frac: elements off / elements over all cases; worst case frac: the largest fraction off in one case of")
    out(f"   >= {BIG} elements; max off (small): the most elements off in one case of fewer; ulps: elements off by")
    out("   1, 2, more roundings of the 16-bit dtype; rows: rows with an element off / rows")
    for dt in DTYPES:
        rows = []
        for name, (_, order, _) in PEERS.items():
            agg = collections.Counter()
            worst_frac, worst_case, max_small, worst_ulp = 0.0, None, 0, 0
            for c, pname, porder, psum, numel, dists, _ in recs:
                if pname != name or c["dtype"] != dt:
                    continue
                d = dists[(porder, psum)]
                agg["cases"] += 1
                agg["el"] += numel
                agg["off"] += d["differ"]
                agg["u1"] += d["ulps"][1]
                agg["u2"] += d["ulps"][2]
                agg["um"] += d["ulps"]["more"]
                agg["rows"] += c["rows"]
                agg["rows_off"] += d["rows_differ"]
                worst_ulp = max(worst_ulp, d["worst"])
                if numel >= BIG:
                    f = d["differ"] / numel
                    if f > worst_frac:
                        worst_frac, worst_case = f, c
                else:
                    max_small = max(max_small, d["differ"])
            if not agg["cases"]:
                continue
            rows.append([name, agg["cases"], f"{agg['el']:,}", fmt_frac(agg["off"], agg["el"]),
                         f"{worst_frac:.2e}" if worst_frac else "0", max_small,
                         f"{agg['u1']}/{agg['u2']}/{agg['um']}", worst_ulp, f"{agg['rows_off']}/{agg['rows']}"])
        out(f"-- {SHORT[dt]}")
        out(table(["peer", "cases", "elements", "frac off", "worst case frac", "max off (small)", "ulps 1/2/>2",
                   "worst ulps", "rows off"], rows))
    # ---- 1b. the same per order and weight dtype, and where the worst cases were ----
    out("")
    out("== 1b. Correct ctm and mf32 kernels pooled by order and weight: the worst cases")
    for dt in DTYPES:
        rows = []
        for order in ORDERS[:2]:
            for wd in ("same", "float32", "none"):
                sel = [(c, numel, dists[(po, ps)]) for c, pn, po, ps, numel, dists, _ in recs
                       if c["dtype"] == dt and po == order
                       and (("none" if not c["has_weight"] else "float32" if c["wdtype"] == torch.float32
                             else "same") == wd)]
                if not sel:
                    continue
                el = sum(n for _, n, _ in sel)
                off = sum(d["differ"] for _, _, d in sel)
                big = [(d["differ"] / n, c, d) for c, n, d in sel if n >= BIG]
                wf, wc, wd_ = max(big, key=lambda t: t[0]) if big else (0.0, None, None)
                where = (f"{wc['rows']}x{wc['n']} {wc['pattern']} eps {wc['eps']:g} {wcond(wc)} res {wc['residual']}"
                         if wc is not None and wf > 0 else "-")
                rows.append([SHORT[order], wd, len(sel), f"{el:,}", fmt_frac(off, el), f"{wf:.2e}" if wf else "0",
                             max(d["differ"] for c, n, d in sel if n < BIG) if any(n < BIG for _, n, _ in sel) else 0,
                             max(d["worst"] for _, _, d in sel), where])
        out(f"-- {SHORT[dt]}")
        out(table(["order", "weight", "runs", "elements", "frac off", "worst case frac", "max off (small)",
                   "worst ulps", "worst case"], rows))
    # ---- 2. catch side: each peer against the other orders' emulations (same sum) ----
    out("")
    out("== 2. Kernels against the emulation of another order, same sum (the catch side)")
    out("   per weight condition; 'same emu' = runs where the two orders' emulations are bit-identical (no kernel")
    out(f"   can be told apart there); min/median frac: over runs of >= {BIG} elements whose emulations differ")
    out("   min (all): the smallest fraction over every run of >= 16 elements whose emulations differ")
    emu_same = {}
    for c, ka, kb, numel, differ in emu_pairs:
        emu_same[(c["index"], ka, kb)] = emu_same[(c["index"], kb, ka)] = differ == 0
    for dt in DTYPES:
        rows = []
        conds = sorted({wcond(c) for c, *_ in recs if c["dtype"] == dt})
        for porder in ORDERS:
            for eorder in ORDERS:
                if eorder == porder:
                    continue
                for cond in conds:
                    fr_big, fr_all, n_runs, n_same = [], [], 0, 0
                    for c, pname, po, ps, numel, dists, _ in recs:
                        if c["dtype"] != dt or po != porder or wcond(c) != cond or (eorder, ps) not in dists:
                            continue
                        n_runs += 1
                        if emu_same[(c["index"], (porder, ps), (eorder, ps))]:
                            n_same += 1
                            continue
                        f = dists[(eorder, ps)]["differ"] / numel
                        if numel >= 16:
                            fr_all.append(f)
                        if numel >= BIG:
                            fr_big.append(f)
                    if not n_runs:
                        continue
                    rows.append([f"{SHORT[porder]} vs {SHORT[eorder]}", cond, n_runs, n_same,
                                 f"{min(fr_big):.2%}" if fr_big else "-",
                                 f"{float(np.median(fr_big)):.2%}" if fr_big else "-",
                                 f"{min(fr_all):.2%}" if fr_all else "-"])
        out(f"-- {SHORT[dt]}")
        out(table(["kernel vs emulation", "weight", "runs", "same emu", "min frac", "median frac", "min (all)"], rows))
    # ---- 3. the sum a fused add normalises ----
    out("")
    out("== 3. Fused add: kernels against their own order's emulation with the other sum")
    for dt in DTYPES:
        rows = []
        for porder in ORDERS[:2]:
            for psum in ("float32", "stored"):
                for rk in ("same", "float32"):
                    other = "stored" if psum == "float32" else "float32"
                    fr_big, fr_all, n_runs, n_same = [], [], 0, 0
                    for c, pname, po, ps, numel, dists, _ in recs:
                        if c["dtype"] != dt or po != porder or ps != psum or c["residual"] != rk:
                            continue
                        n_runs += 1
                        if emu_same[(c["index"], (porder, psum), (porder, other))]:
                            n_same += 1
                            continue
                        f = dists[(porder, other)]["differ"] / numel
                        fr_all.append(f) if numel >= 16 else None
                        fr_big.append(f) if numel >= BIG else None
                    if n_runs:
                        rows.append([f"{SHORT[porder]} {psum} sum vs {other}", f"residual {rk}", n_runs, n_same,
                                     f"{min(fr_big):.2%}" if fr_big else "-",
                                     f"{float(np.median(fr_big)):.2%}" if fr_big else "-",
                                     f"{min(fr_all):.2%}" if fr_all else "-"])
        out(f"-- {SHORT[dt]}")
        out(table(["kernel vs emulation", "residual", "runs", "same emu", "min frac", "median frac", "min (all)"],
                  rows))
    # ---- 4. how often two emulations differ at all ----
    out("")
    out("== 4. The emulations against each other: fraction of elements two orders (same sum) compute apart")
    for dt in DTYPES:
        rows = []
        agg = collections.defaultdict(lambda: [0, 0, 0, 0])
        for c, ka, kb, numel, differ in emu_pairs:
            if c["dtype"] != dt or ka[1] != kb[1]:
                continue
            k = (f"{SHORT[ka[0]]} vs {SHORT[kb[0]]}", wcond(c))
            a = agg[k]
            a[0] += 1
            a[1] += differ == 0
            a[2] += numel
            a[3] += differ
        for (pair, cond), (n, same, el, off) in sorted(agg.items()):
            rows.append([pair, cond, n, same, fmt_frac(off, el)])
        out(f"-- {SHORT[dt]}")
        out(table(["orders", "weight", "cases x sums", "identical", "frac apart"], rows))
    # ---- 5. the proposed law on these runs ----
    ulps = args.law_ulps
    emu_apart = {}
    for c, ka, kb, numel, differ in emu_pairs:
        emu_apart[(c["index"], ka, kb)] = emu_apart[(c["index"], kb, ka)] = differ
    out("")
    out(f"== 5. The fraction law: pass iff no element is more than {ulps} roundings off the declared order's")
    out("   emulation and at most max(K, floor(f x elements)) elements are; declared ctm or mf32; " +
        ", ".join(f"{SHORT[d]}: f {args.law_fraction[d]:g}, K {args.law_count[d]}" for d in DTYPES) + ".")
    out("   A kernel judged by another order or sum than its own must fail where the two emulations are more")
    out("   than that allowance apart ('apart'); where they are not, no law can tell them apart ('too close')")
    for dt in DTYPES:
        frac, count = args.law_fraction[dt], args.law_count[dt]
        allow = lambda n: max(count, math.floor(frac * n))  # noqa: E731
        rows = []
        for label, rel in (("own order and sum (must pass)", "own"), ("other order, same sum (must fail)", "order"),
                           ("own order, other sum (must fail)", "sum")):
            for lo, hi in NUMEL_BINS:
                n_runs = n_pass = n_close = 0
                for c, pname, po, ps, numel, dists, _ in recs:
                    if c["dtype"] != dt or not lo <= numel <= hi:
                        continue
                    if rel == "own":
                        targets = [(po, ps)] if po != "all_in_dtype" else []
                    elif rel == "order":
                        targets = [(o, ps) for o in ORDERS[:2] if o != po and (o, ps) in dists]
                    else:
                        targets = [(po, s) for s in ("float32", "stored") if s != ps and (po, s) in dists] \
                            if po != "all_in_dtype" else []
                    for t in targets:
                        if rel != "own" and (po, ps) in dists and emu_apart.get((c["index"], (po, ps), t), 0) \
                                <= allow(numel):
                            n_close += 1
                            continue
                        n_runs += 1
                        n_pass += law_passes(dists[t], frac, count, ulps)
                if n_runs or n_close:
                    caught = n_runs - n_pass
                    rows.append([label, f"{lo}-{hi}", n_runs, n_pass, caught,
                                 f"{caught / n_runs:.1%}" if n_runs and rel != "own" else "-",
                                 n_close if rel != "own" else "-"])
        out(f"-- {SHORT[dt]}")
        out(table(["comparison", "elements", "runs apart", "passed", "failed", "caught", "too close"], rows))
    # ---- 6. diagnosis: which emulations the output is consistent with, where the law failed it ----
    out("")
    out("== 6. Diagnosis where the law failed a ctm or mf32 kernel judged by another order or sum: the")
    out("   emulations the output passes the same law against. right: its own (order, sum) alone; ambiguous:")
    out("   its own and others (an input on which they are within the allowance); wrong: its own not among")
    out("   them. all_in_dtype kernels (runs >= %d elements): the emulation with the fewest elements off" % BIG)
    for dt in DTYPES:
        frac, count = args.law_fraction[dt], args.law_count[dt]
        rows = []
        aid_near = collections.Counter()
        for porder in ORDERS:
            cnt = collections.Counter()
            for c, pname, po, ps, numel, dists, _ in recs:
                if c["dtype"] != dt or po != porder:
                    continue
                own = (po, ps)
                if porder == "all_in_dtype":
                    if numel >= BIG:
                        best = min(d["differ"] for d in dists.values())
                        aid_near[(pname, "/".join(f"{SHORT[k[0]]} {k[1]} sum" if k[1] != "none" else SHORT[k[0]]
                                                  for k, d in dists.items() if d["differ"] == best))] += 1
                    continue
                consistent = {t for t, d in dists.items() if law_passes(d, frac, count, ulps)}
                for t in dists:
                    if t == own or t[0] == "all_in_dtype" or t in consistent:
                        continue
                    cnt["right" if consistent == {own} else "ambiguous" if own in consistent else "wrong"] += 1
            if porder != "all_in_dtype":
                rows.append([SHORT[porder], cnt["right"], cnt["ambiguous"], cnt["wrong"]])
        out(f"-- {SHORT[dt]}")
        out(table(["kernel order", "right", "ambiguous", "wrong"], rows))
        out(table(["all_in_dtype kernel", "nearest emulation", "runs"],
                  [[k[0], k[1], v] for k, v in sorted(aid_near.items())]))
    # ---- 7. residual_out ----
    out("")
    out("== 7. residual_out against the emulation's (same sum): runs that differ in any element")
    out(f"   {len(resid_bad)} runs" + ("" if not resid_bad else ": " + "; ".join(
        f"{n} {s} {c['rows']}x{c['n']} {SHORT[c['dtype']]} res {c['residual']}: {k} elements"
        for c, n, s, k in resid_bad[:10])))
    # ---- 8. the window form of the law ----
    out("")
    out("== 8. The window form: an element passes when it lies in the declared order's window, the outputs")
    out("   that order gives when each float32 value before a rounding to the dtype moves by up to U float32")
    out("   ulps (order.order_window); declared ctm or mf32. Must pass: ctm and mf32 kernels against their own")
    out("   order and sum. Must fail: any kernel against another order (same sum) or its own order with the")
    out("   other sum, where that emulation lies outside the window somewhere ('apart'; else 'too close')")
    wp = {(c["index"], kd, ko): m for c, kd, ko, numel, m in win_pairs}
    for dt in DTYPES:
        rows = []
        for ui, u in enumerate(WINDOW_ULPS):
            n_runs = n_miss = worst = 0
            worst_frac, worst_at = 0.0, "-"
            who = collections.Counter()
            for c, pname, po, ps, numel, dists, wm in recs:
                if c["dtype"] != dt or po == "all_in_dtype":
                    continue
                m = wm[(po, ps)][ui]
                n_runs += 1
                if m:
                    n_miss += 1
                    who[pname] += 1
                    if m > worst:
                        worst = m
                        worst_at = (f"{pname} {ps} sum, {c['rows']}x{c['n']} {c['pattern']} eps {c['eps']:g} "
                                    f"{wcond(c)} res {c['residual']}")
                    if numel >= BIG:
                        worst_frac = max(worst_frac, m / numel)
            rows.append([u, n_runs, n_miss, worst, f"{worst_frac:.2e}" if worst_frac else "0",
                         ", ".join(f"{k} {v}" for k, v in who.most_common()) or "-", worst_at])
        out(f"-- {SHORT[dt]}: correct kernels (must pass)")
        out(table(["U", "runs", "runs with a miss", "most misses", "worst frac (>= %d)" % BIG, "kernels that missed",
                   "most misses at"], rows))
        rows = []
        for ui, u in enumerate(WINDOW_ULPS):
            for label, rel in (("other order", "order"), ("other sum", "sum")):
                for lo, hi in NUMEL_BINS:
                    n_apart = n_caught = n_close = 0
                    fr = []
                    for c, pname, po, ps, numel, dists, wm in recs:
                        if c["dtype"] != dt or not lo <= numel <= hi:
                            continue
                        for kd, m in wm.items():
                            if rel == "order" and not (kd[1] == ps and kd[0] != po):
                                continue
                            if rel == "sum" and not (kd[0] == po and kd[1] != ps):
                                continue
                            if wp.get((c["index"], kd, (po, ps)), [0] * len(WINDOW_ULPS))[ui] == 0:
                                n_close += 1
                                continue
                            n_apart += 1
                            n_caught += m[ui] > 0
                            fr.append(m[ui] / numel)
                    if n_apart or n_close:
                        rows.append([u, label, f"{lo}-{hi}", n_apart, n_caught,
                                     f"{n_caught / n_apart:.1%}" if n_apart else "-",
                                     f"{min(fr):.2%}" if fr else "-", n_close])
        out(f"-- {SHORT[dt]}: kernels judged by another order or sum (must fail)")
        out(table(["U", "judged by", "elements", "runs apart", "caught", "caught %", "min frac outside",
                   "too close"], rows))
        ui = WINDOW_ULPS.index(args.window_ulps)
        cnt = collections.Counter()
        for c, pname, po, ps, numel, dists, wm in recs:
            if c["dtype"] != dt or po == "all_in_dtype":
                continue
            consistent = {k for k, m in wm.items() if m[ui] == 0}
            for kd, m in wm.items():
                if kd != (po, ps) and m[ui]:
                    cnt["right" if consistent == {(po, ps)} else "ambiguous" if (po, ps) in consistent
                        else "wrong"] += 1
        out(f"-- {SHORT[dt]}: diagnosis at U = {args.window_ulps} where a ctm or mf32 kernel judged by another "
            f"order or sum missed its window: right {cnt['right']}, ambiguous {cnt['ambiguous']}, wrong {cnt['wrong']}")
    out("")
    n_cases = len({c["index"] for c, *_ in recs})
    n_el = sum(c["rows"] * c["n"] for c in {c["index"]: c for c, *_ in recs}.values())
    out(f"{n_cases} cases, {n_el:,} elements, {len(recs)} kernel runs, {wall:.0f} s")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cases", type=int, default=800)
    p.add_argument("--law-fraction", default="float16=0.02,bfloat16=0.06",
                   help="the fraction law's f per dtype (section 5)")
    p.add_argument("--law-count", default="float16=12,bfloat16=24", help="the fraction law's K per dtype")
    p.add_argument("--law-ulps", type=int, default=2, help="the most roundings any element may be off")
    p.add_argument("--window-ulps", type=int, default=1024, choices=WINDOW_ULPS,
                   help="the window law's U, for its diagnosis (section 8)")
    args = p.parse_args(argv)
    by_name = {SHORT[d]: d for d in DTYPES}
    for name, kind in (("law_fraction", float), ("law_count", int)):
        parsed = dict(kv.split("=") for kv in getattr(args, name).split(","))
        if set(parsed) != set(by_name):
            p.error(f"--{name.replace('_', '-')}: expected float16=V,bfloat16=V, but got {getattr(args, name)!r}")
        setattr(args, name, {by_name[k]: kind(v) for k, v in parsed.items()})
    # One thread: the machine's cores are shared, and two threads ran these small elementwise passes
    # three times slower than one there.
    torch.set_num_threads(1)
    # Huge float16 inputs overflow on purpose (squares past 65504, x + residual past it): numpy's warnings
    # about the infs and NaNs that follow are the cases working, not news.
    np.seterr(all="ignore")
    rng = np.random.default_rng(args.seed)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "harness/judging/order.py", "benchmarks/rounding_order.py", "benchmarks/rounding_order_peers.py"],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        commit, dirty = "unknown", ""
    cpu = platform.processor()
    if Path("/proc/cpuinfo").exists():
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), cpu)
    print(f"# rounding orders, CPU {cpu} ({len(os.sched_getaffinity(0))} cores), torch {torch.__version__}, "
          f"numpy {np.__version__}, python {platform.python_version()}, commit {commit}{'+dirty' if dirty else ''}")
    print("# kernels: benchmarks/rounding_order_peers.py; emulations, distances, windows: harness/judging/order.py")
    recs, emu_pairs, resid_bad, win_pairs = [], [], [], []
    t0 = time.monotonic()
    for i in range(args.cases):
        run_case(draw_case(rng, i, args.seed), recs, emu_pairs, resid_bad, win_pairs)
    wall = time.monotonic() - t0
    report(recs, emu_pairs, resid_bad, win_pairs, args, wall)
    print("# (measured with: python3 benchmarks/rounding_order.py " + " ".join(sys.argv[1:]) + ")")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
