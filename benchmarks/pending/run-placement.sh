#!/usr/bin/env bash
# One call on one H200 (at most BUDGET_S, 570 s): the placement experiment of benchmarks/pending/README.md.
# Applies placement.patch to this copy of the tree, builds the variants side by side, checks them (their outputs'
# bits against the defaults', the CUDA path tests under the global exchange), times them through the users' path,
# runs compute-sanitizer's four tools on the path cases that take the global kernels, then profiles the 262,144
# forwards under Nsight Compute while time is left. Everything lands in $OUT (the tables) and
# $OUT/placement-logs.tgz; each step says how long it took, and a step that would not fit is named as not run.
#
#   OUT=/tmp/placement bash benchmarks/pending/run-placement.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-.build/placement}
LOGS=${LOGS:-/tmp/placement-logs}
BUDGET_S=${BUDGET_S:-570}
mkdir -p "$OUT" "$LOGS"
t0=$SECONDS
left() { echo $((BUDGET_S - (SECONDS - t0))); }
say() { echo "placement: $* ($((SECONDS - t0)) s)" | tee -a "$OUT/placement.md"; }
finish() { tar czf "$OUT/placement-logs.tgz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")"; }
trap finish EXIT

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
git apply --check benchmarks/pending/placement.patch 2>/dev/null && git apply benchmarks/pending/placement.patch ||
  patch -p1 --forward < benchmarks/pending/placement.patch || { say "placement.patch does not apply"; exit 2; }
# (git apply skips, silently, the paths of a tree that lies inside another repository: the settings would then be
# no-ops and every variant the defaults)
grep -q RMSNORM_FWD_GLOBAL_FROM kernels/rmsnorm_plan.h || { say "placement.patch was not applied"; exit 2; }
say "patch applied: $(git diff --stat 2>/dev/null | tail -1)"

BASE="base:"
LB="lb:RMSNORM_CLUSTER_POLICY=2"
MID8="mid8:RMSNORM_FWD_STAGED_MID_CLUSTER=8"
GLOB="glob:RMSNORM_FWD_GLOBAL_FROM=2048,RMSNORM_BWD_GLOBAL=1"
GLOB4="glob4:RMSNORM_FWD_GLOBAL_FROM=2048,RMSNORM_FWD_GLOBAL_VPT=4"
defines() { echo "${1#*:}"; }
# glob with the forward's grid capped at 256 CTAs: the path tests reach every forward kernel's later rows
GLOBCAP="globcap:$(defines "$GLOB"),RMSNORM_FWD_MAX_CTAS=256"

# 1. Every variant built side by side (variants.py builds them all before it times any), and beside them glob as
#    the sanitizer builds it (-lineinfo), for step 4.
RMSNORM_LINEINFO=1 RMSNORM_KERNEL_DEFINES=$(defines "$GLOB") python3 -m harness build --target project --device cuda \
  >"$LOGS/build-sanitize.log" 2>&1 &
SAN_BUILD=$!
python3 - "$BASE" "$LB" "$MID8" "$GLOB" "$GLOB4" "$GLOBCAP" <<'PY' >"$LOGS/build.log" 2>&1
import sys
sys.path.insert(0, "benchmarks")
from variants import build_variants, parse_variants
failed = build_variants(parse_variants(sys.argv[1:], "placement"))
print("failed builds:", failed or "none")
sys.exit(1 if failed else 0)
PY
say "builds: $(tail -1 "$LOGS/build.log")"

# 2. Correctness first: the outputs' bits against the defaults' (glob lays every row out as the defaults do but
#    the float32 262,144 forward, so its y, inv_rms and grad_x must match them bit for bit elsewhere; its
#    grad_weight follows its backward grid's units), then the CUDA path tests (reference, batch invariance,
#    determinism) under the global exchange, both directions, with the forward's grid capped (later rows).
RMSNORM_KERNEL_DEFINES= python3 benchmarks/pending/same_bits.py save "$LOGS/base.pt" >"$LOGS/bits-base.log" 2>&1
for v in "$LB" "$MID8" "$GLOB" "$GLOB4"; do
  RMSNORM_KERNEL_DEFINES=$(defines "$v") python3 benchmarks/pending/same_bits.py compare "$LOGS/base.pt" \
    >"$LOGS/bits-${v%%:*}.log" 2>&1
  { echo; echo "bits of ${v%%:*} against the defaults:"; grep '^|' "$LOGS/bits-${v%%:*}.log"; } >>"$OUT/placement.md"
  say "bits ${v%%:*}: $(tail -1 "$LOGS/bits-${v%%:*}.log")"
done
RMSNORM_KERNEL_DEFINES=$(defines "$GLOBCAP") timeout 150 python3 -m pytest tests/test_cuda_paths.py -q -x \
  -p no:cacheprovider >"$LOGS/paths-globcap.log" 2>&1
say "paths under globcap: $(tail -1 "$LOGS/paths-globcap.log")"

# 3. Timed through the users' path: the forward at the lengths the settings move, the backward under the
#    settings that reach it (the cluster placement policy, the global exchange).
# Each under a deadline (a killed one leaves its variants' bench.json in the logs, but no table).
# The forward may run until 200 s are left, the backward until 130 s (the sanitizer's step needs about 120 s).
if [ "$(left)" -gt 260 ]; then
  timeout $(($(left) - 200)) python3 benchmarks/variants.py --no-decode --directions forward --n 16384,65536,262144 \
    --out "$LOGS/fwd" "$BASE" "$LB" "$MID8" "$GLOB" "$GLOB4" >"$OUT/variants-forward.md" 2>"$LOGS/fwd.progress"
  say "forward variants: exit $?"
else
  say "forward variants: not run ($(left) s left)"
fi
if [ "$(left)" -gt 170 ]; then
  timeout $(($(left) - 130)) python3 benchmarks/variants.py --no-decode --directions backward --n 65536,262144 \
    --out "$LOGS/bwd" "$BASE" "$LB" "$GLOB" >"$OUT/variants-backward.md" 2>"$LOGS/bwd.progress"
  say "backward variants: exit $?"
else
  say "backward variants: not run ($(left) s left)"
fi

# 4. compute-sanitizer (memcheck, racecheck, initcheck, synccheck side by side) on the path cases of
#    harness/sanitize.py that glob sends to the global kernels: forward rows of 2, 3, 16 and 32 CTAs, backward
#    units of 2, 4 and 16 CTAs over 1 to 140 rows (9: bfloat16 262,144; 14: float32 262,144; 16 and 17: 140 and
#    70 rows of uneven slabs; 19: float32 131,072). glob ships only once the lane's sanitize step passes with it;
#    this says whether a tool hangs a grid whose CTAs wait on each other (the step is cut at its deadline if so).
wait "$SAN_BUILD"
say "sanitizer's build of glob: exit $?"
if [ "$(left)" -gt 100 ]; then
  RMSNORM_KERNEL_DEFINES=$(defines "$GLOB") timeout $(($(left) < 180 ? $(left) - 20 : 160)) \
    python3 -m harness sanitize --paths 9,14,16,17,19 >"$LOGS/sanitize-glob.log" 2>&1
  rc=$?
  { echo; echo "compute-sanitizer on glob (path cases 9,14,16,17,19), exit $rc:"
    grep -E '^(memcheck|racecheck|initcheck|synccheck) |^rmsnorm sanitize' "$LOGS/sanitize-glob.log"
  } >>"$OUT/placement.md"
  say "sanitizer on glob: exit $rc$([ "$rc" = 124 ] && echo ' (cut at its deadline: a tool hung or ran long)')"
else
  say "sanitizer on glob: not run ($(left) s left)"
fi

# 5. Nsight Compute on the 262,144 forwards (where the clusters' placement was measured), as time allows.
for v in "$GLOB" "$BASE" "$MID8" "$LB"; do
  for dtype in bfloat16 float32; do
    if [ "$(left)" -lt 45 ]; then say "profile ${v%%:*} $dtype: not run ($(left) s left)"; continue; fi
    limit=$(($(left) < 65 ? $(left) - 5 : 60))
    RMSNORM_KERNEL_DEFINES=$(defines "$v") timeout $limit python3 -m harness profile --shape 256x262144 \
      --dtype "$dtype" --direction forward --out "$LOGS/profile-${v%%:*}-$dtype" \
      >"$LOGS/profile-${v%%:*}-$dtype.log" 2>&1
    rc=$?
    { echo; echo "profile ${v%%:*} $dtype 256x262144 forward:"; cat "$LOGS/profile-${v%%:*}-$dtype.log"; } \
      >>"$OUT/placement.md"
    say "profile ${v%%:*} $dtype: exit $rc"
  done
done
say "done"
