"""kernels/rmsnorm_plan.h: every planned layout covers its row, wastes less than half of it, and
fits the hardware; the plan is a function of the row length alone (its signature takes nothing
else), which is what makes the fast paths batch invariant. Compiled and run as plain C++."""

import re
import shutil
import subprocess

import pytest

from rmsnorm._buildenv import ROOT

PROGRAM = r"""
#include <cstdio>
#include "rmsnorm_plan.h"
using namespace rmsnorm::plan;
static void show(const char* dir, long n_vec, const Plan& p, long rows) {
  // the shared memory a staged CTA asks for, as the launcher computes it (a 16-byte vector holds
  // 8 elements of 2 bytes, 4 of 4)
  const long smem = dir[0] == 'f' ? long(forward_smem_bytes(p))
                                  : long(backward_staged_bytes(p, dir[3] == '2' ? 8 : 4));
  std::printf("%s %ld %d %d %d %d %ld %ld %d %d\n", dir, n_vec, p.group, p.vpt, p.cta, p.cluster,
              p.ok() ? (dir[0] == 'f' ? forward_units(p, rows) : backward_units(p, rows)) : 0L, smem, int(p.staged),
              int(p.split));
}
int main() {
  // the staged CTAs the plan is built with: threads forward, threads and vectors a thread backward
  std::printf("staged %d %d %d %d %d %d\n", kFwdStagedCta, kBwdStagedCta, kBwdStagedVpt, kFwdStagedVpt, kFwdLongCta,
              kFwdLongVpt);
  long rows_list[4] = {1, 4097, 20000, 1L << 22};
  for (long n_vec = 1; n_vec <= 140000; n_vec += (n_vec < 2100 ? 1 : (n_vec < 8300 ? 7 : 97))) {
    for (long rows : rows_list) {
      show("fwd", n_vec, forward_plan(n_vec), rows);
      show("bwd2", n_vec, backward_plan(n_vec, 2), rows);  // 2-byte elements
      show("bwd4", n_vec, backward_plan(n_vec, 4), rows);
    }
  }
}
"""


def _run_plan_program(folder, source: str, *args: str) -> str:
    """Compile a C++ program that includes rmsnorm_plan.h and return what it prints."""
    cxx = shutil.which("c++") or shutil.which("g++")
    assert cxx, "no C++ compiler on PATH (the CPU lane builds the extension with one)"
    (folder / "main.cpp").write_text(source)
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{ROOT / 'kernels'}", str(folder / "main.cpp"), "-o",
                    str(folder / "plan")], check=True, capture_output=True, text=True)
    return subprocess.run([str(folder / "plan"), *args], check=True, capture_output=True, text=True).stdout


# The plans of rows given as (16-byte vectors, rows, element bytes): one line each of the forward
# plan's group, cluster, staged, split and the backward plan's group, cluster, staged, split, units over
# those rows, warps a unit, then the forward plan's vectors a thread.
PLAN_OF = (
    '#include <cstdio>\n#include <cstdlib>\n#include "rmsnorm_plan.h"\nusing namespace rmsnorm::plan;\n'
    'int main(int argc, char** argv) {\n  for (int i = 1; i + 2 < argc; i += 3) {\n'
    '    long v = std::atol(argv[i]), rows = std::atol(argv[i + 1]);\n'
    '    Plan f = forward_plan(v), b = backward_plan(v, std::atoi(argv[i + 2]));\n'
    '    std::printf("%d %d %d %d %d %d %d %d %ld %d %d %d\\n", f.group, f.cluster, int(f.staged), int(f.split),'
    ' b.group, b.cluster, int(b.staged), int(b.split), long(backward_units(b, rows)), b.cta / b.group, f.vpt,'
    ' b.vpt);\n  }\n}\n')
PLAN_FIELDS = ("f_group", "f_cluster", "f_staged", "f_split", "b_group", "b_cluster", "b_staged", "b_split", "b_units",
               "b_unit_groups", "f_vpt", "b_vpt")


def _plans_of(folder, rows_of: list[tuple[int, int, int]]) -> list[dict]:
    out = _run_plan_program(folder, PLAN_OF, *(str(a) for triple in rows_of for a in triple))
    return [dict(zip(PLAN_FIELDS, map(int, line.split()))) for line in out.splitlines() if line]


@pytest.fixture(scope="module")
def plan_output(tmp_path_factory):
    """(the staged CTAs' sizes, {"fwd_cta", "bwd_cta", "bwd_vpt", "fwd_vpt", "fwd_long_cta", "fwd_long_vpt"}; one
    tuple a plan) from PROGRAM."""
    first, *lines = _run_plan_program(tmp_path_factory.mktemp("plan"), PROGRAM).splitlines()
    staged = dict(zip(("fwd_cta", "bwd_cta", "bwd_vpt", "fwd_vpt", "fwd_long_cta", "fwd_long_vpt"),
                      map(int, first.split()[1:])))
    rows = []
    for line in lines:
        dir_, *nums = line.split()
        rows.append((dir_, *map(int, nums)))
    return staged, rows


@pytest.fixture(scope="module")
def staged_cta(plan_output):
    return plan_output[0]


@pytest.fixture(scope="module")
def plans(plan_output):
    return plan_output[1]


def test_every_plan_covers_its_row_and_fits_the_hardware(plans, staged_cta):
    seen = set()
    for dir_, n_vec, group, vpt, cta, cluster, units, smem, staged, split in plans:
        where = f"{dir_} n_vec={n_vec}: group {group}, vpt {vpt}, cta {cta}, cluster {cluster}, staged {staged}"
        assert vpt > 0, f"{where}: no plan (the split paths take any length)"
        if split:  # no row held: a CTA of 256 threads a slice (8 vectors a thread), or a strip of columns
            seen.add((dir_[:3], "split"))
            assert (group, vpt, cta, cluster, staged) == (256, 8, 256, 1, 0), where
            assert dir_ == "fwd" or 1 <= units <= 512, where  # the backward's partial rows
            continue
        # the staged backward at twice its vectors a thread: 4-byte rows past a 16-CTA cluster of them
        max_vpt = (16 if staged else 8) if dir_ == "fwd" else (
            staged_cta["bwd_vpt"] * (2 if dir_ == "bwd4" else 1) if staged else 2)
        seen.add((dir_[:3], cluster > 1))
        cap = group * vpt * cluster
        assert group & (group - 1) == 0 and 1 <= group <= 1024, where
        assert vpt in (1, 2, 4, 8, 16) and vpt <= max_vpt, where
        if staged:  # the CTA's slab of the row (rows of two tensors, and float sums unless held, backward) in
            # shared memory: under the 227 KB a CTA may have; one row a CTA of the staged size, a constant of
            # the staged kernels (forward: the long rows' CTA past a 16-CTA cluster of the first)
            size = staged_cta["bwd_cta"]
            if dir_ == "fwd":
                long_rows = n_vec > 16 * staged_cta["fwd_cta"] * staged_cta["fwd_vpt"]
                size = staged_cta["fwd_long_cta"] if long_rows else staged_cta["fwd_cta"]
                assert vpt == (staged_cta["fwd_long_vpt"] if long_rows else staged_cta["fwd_vpt"]), where
            assert cta == group == size and 0 < smem <= 227 * 1024, f"{where}: {smem} bytes of shared memory"
        assert cta % group == 0 and cta <= 1024 and cta % 32 == 0, where
        assert cluster & (cluster - 1) == 0 and cluster <= 16, where
        assert cluster == 1 or cta == group, where  # one row per CTA of a cluster
        assert n_vec <= cap < 2 * n_vec, f"{where}: holds {cap} vectors"
        assert units >= 1, where
        if dir_ != "fwd" and not staged:  # the CTA's row groups hand their grad_weight sums over in shared memory
            assert (cta // group - 1) * vpt * 8 * group * 4 <= 48 * 1024, where
    assert seen == {("fwd", False), ("fwd", True), ("fwd", "split"), ("bwd", False), ("bwd", True), ("bwd", "split")}


# The shared memory a forward CTA asks for under a cap of CTAs a multiprocessor (RMSNORM_FWD_STAGED_PER_SM,
# RMSNORM_FWD_PER_SM): at least what it uses, and so much that no more than the cap fit in a
# multiprocessor's 228 KB (each CTA also holds 1 KB the hardware reserves and about 0.4 KB of static slots).
CAPPED = (
    '#include <cstdio>\n#include <initializer_list>\n#include "rmsnorm_plan.h"\nusing namespace rmsnorm::plan;\n'
    'int main() {\n  for (long v : {64L, 1024L, 4096L, 4097L, 8192L, 16384L, 32768L, 32769L, 65536L, 65537L}) {\n'
    '    Plan p = forward_plan(v);\n'
    '    std::printf("%ld %d %d %ld %ld\\n", v, int(p.staged), int(p.split), long(p.forward_staged_bytes()),'
    ' long(forward_smem_bytes(p)));\n  }\n}\n')


@pytest.mark.parametrize("per_sm", [0, 2, 3, 4])
def test_a_cap_of_forward_ctas_a_multiprocessor_holds(tmp_path, per_sm):
    defines = f"#define RMSNORM_FWD_STAGED_PER_SM {per_sm}\n#define RMSNORM_FWD_PER_SM {per_sm}\n"
    out = _run_plan_program(tmp_path, defines + CAPPED)
    for line in out.splitlines():
        v, staged, split, used, asked = map(int, line.split())
        if per_sm == 0 or split:
            assert asked == used, line  # no cap: what the kernel uses (the split forward never capped)
            continue
        assert asked >= used, line
        ctas = 228 * 1024 // (asked + 1024 + 400)
        fit = 228 * 1024 // (used + 1024 + 400)  # a cap above what fits leaves it as it is
        assert ctas == min(per_sm, fit), f"{line}: {ctas} CTAs of {asked} bytes fit a multiprocessor, the cap is {per_sm}"


@pytest.mark.parametrize("setting, builds", [("RMSNORM_FWD_STAGED_LONG_CTA 0", True),
                                             ("RMSNORM_FWD_STAGED_LONG_CTA 512", True),
                                             ("RMSNORM_FWD_STAGED_LONG_CTA 1024", False),
                                             ("RMSNORM_FWD_SHORT_TO 0", True),
                                             ("RMSNORM_FWD_SHORT_TO 512", False)])
def test_a_setting_the_kernels_cannot_build_is_refused_by_name(tmp_path, setting, builds):
    # 3 long-row CTAs of 1024 threads would not fit a multiprocessor; the launcher's 2-vector groups stop at 128
    if builds:
        _run_plan_program(tmp_path, f"#define {setting}\n" + CAPPED)
        return
    with pytest.raises(subprocess.CalledProcessError) as failed:
        _run_plan_program(tmp_path, f"#define {setting}\n" + CAPPED)
    assert setting.split()[0] in failed.value.stderr, failed.value.stderr[-2000:]


def test_the_split_paths_take_the_long_rows(plans, tmp_path):
    # Where each width measured faster split (kernels/rmsnorm_plan.h): the forward past 65,536 vectors,
    # the longest row a cluster holds (16 staged CTAs of 4,096 vectors past 32,768: bfloat16 N =
    # 512K, float32 256K); the backward past 32,768 vectors of 2-byte elements (bfloat16 N = 16K to 256K
    # staged) and 65,536 of 4-byte ones (float32 128K and 256K staged, 256K at 8 vectors a thread).
    first = {}
    for dir_, n_vec, *_, split in plans:
        if split:
            first[dir_] = min(first.get(dir_, n_vec), n_vec)
        else:
            assert n_vec < first.get(dir_, n_vec + 1), f"{dir_} n_vec={n_vec}: not split, but a shorter row is"
    edges = [(v, 1, width) for width in (2, 4)
             for v in (1024, 1025, 2048, 2049, 4096, 4097, 8192, 8193, 16384, 16385, 32768, 32769, 65536, 65537)]
    for (v, _, width), p in zip(edges, _plans_of(tmp_path, edges)):
        assert p["f_split"] == (v > 65536), (v, width, p)
        # the staged forward past 2,048 vectors (bfloat16 N = 32K, float32 16K), in CTAs of twice the slab (4,096
        # vectors, 64 KB) past 32,768
        slab = p["f_group"] * p["f_vpt"]
        assert p["f_staged"] == (2048 < v <= 65536) and (slab == 4096) == (32768 < v <= 65536), (v, width, p)
        assert p["b_split"] == (v > (32768 if width == 2 else 65536)), (v, width, p)
        # the staged backward: 2-byte elements past 1,024 vectors to 32,768, 4-byte ones past 16,384 to 65,536
        # (at 8 vectors a thread past 32,768)
        assert p["b_staged"] == ((1024 < v <= 32768) if width == 2 else (16384 < v <= 65536)), (v, width, p)
        if p["b_staged"]:
            assert p["b_vpt"] == (8 if v > 32768 else 4), (v, width, p)


def test_short_rows_take_two_vectors_a_thread(tmp_path):
    # kernels/rmsnorm_plan.h, RMSNORM_FWD_SHORT_TO: forward rows of 65 to 256 vectors (float32 N = 1K, bfloat16
    # 1K and 2K) in groups of 64 or 128 threads at 2 vectors each; 4 vectors a thread on either side of them
    # but the shortest (a warp while it holds the row at 2 or fewer).
    rows_of = [(v, 1, 2) for v in (33, 64, 65, 128, 129, 256, 257, 512)]
    got = {v: (p["f_group"], p["f_vpt"]) for (v, _, _), p in zip(rows_of, _plans_of(tmp_path, rows_of))}
    assert got == {33: (32, 2), 64: (32, 2), 65: (64, 2), 128: (64, 2), 129: (128, 2), 256: (128, 2),
                   257: (128, 4), 512: (128, 4)}, got


def test_backward_units_do_not_depend_on_the_device(plans):
    # A unit count is min(row groups, a constant): the same on every GPU, so is grad_weight's order. A
    # split unit is a run of 32 rows, or of more where 32 would make more than 512 units: 1, 4,097,
    # 20,000 and 2^22 rows make 1, 129 (of 32 rows), 500 (of 40) and 512 units (of 8,192).
    # Clusters of 2 to 16 CTAs that the H200 runs at once (cudaOccupancyMaxActiveClusters there), by
    # CTAs a multiprocessor: no clustered grid has more, so that none waits for another to finish.
    at_once = {1: {2: 66, 4: 30, 8: 15, 16: 7}, 2: {2: 132, 4: 62, 8: 30, 16: 14}}
    split_units = set()
    for dir_, n_vec, group, vpt, cta, cluster, units, smem, staged, split in plans:
        if dir_ != "fwd" and split:
            split_units.add(units)
        elif dir_ != "fwd":
            per_sm = 1 if staged else 1024 // cta
            assert units <= max(1, 132 * per_sm // cluster), (n_vec, units)
            assert cluster == 1 or units <= at_once[per_sm][cluster], (dir_, n_vec, cluster, units)
    assert split_units == {1, 129, 500, 512}, split_units


def test_the_sanitizer_cases_reach_every_launch_path(tmp_path, staged_cta):
    """harness/tools/sanitize.py runs compute-sanitizer on one case a path, not a random sample: together
    they reach the fallback, every forward and backward register regime, clusters of 4, 8 and 16
    forward and of 2 to 16 backward, the staged forward (in its CTAs and the long rows') and backward (in
    one CTA and clusters of 2, 4 and 16, of both widths; 4-byte elements at 8 vectors a thread, a row in
    registers), the split forward and backward,
    aligned copies of misaligned rows, and zero rows."""
    from harness.judging.cases import DTYPES
    from harness.tools.sanitize import PATHS, sample

    cases = sample()
    assert len(cases) == len(PATHS)

    def vec(c):  # elements of a 16-byte vector
        return 16 // DTYPES[c.dtype].itemsize

    fast = [(c.n // vec(c), c.rows, DTYPES[c.dtype].itemsize) for c in cases
            if c.dtype != "float64" and c.n % vec(c) == 0 and c.rows > 0]
    plans = _plans_of(tmp_path, fast)
    fwd = {(p["f_group"], p["f_cluster"], p["f_staged"]) for p in plans if not p["f_split"]}
    bwd = {(p["b_group"], p["b_cluster"], p["b_staged"]) for p in plans if not p["b_split"]}
    assert {cl for _, cl, st in fwd if st} >= {4, 8, 16}, fwd  # the staged forward in clusters
    # and in the long rows' CTAs (rows past 32,768 vectors: a cluster of 16)
    long_shape = (staged_cta["fwd_long_cta"], staged_cta["fwd_long_vpt"])
    assert any(p["f_staged"] and (p["f_group"], p["f_vpt"]) == long_shape for p in plans), plans
    assert long_shape[0] * long_shape[1] == 2 * staged_cta["fwd_cta"] * staged_cta["fwd_vpt"], staged_cta
    assert {g for g, cl, st in fwd if cl == 1} >= {1, 32, 128, 256, 512}, fwd  # register rows, 1 to 512 threads
    # every register forward the launcher builds at 2 vectors a thread (short rows: groups of 32, 64 and 128)
    assert {p["f_group"] for p in plans if p["f_vpt"] == 2 and not p["f_staged"]} >= {32, 64, 128}, plans
    assert {cl for g, cl, st in bwd if not st} >= {1, 2, 4, 8, 16} and (512, 8, 0) in bwd, bwd  # register backward
    assert (staged_cta["bwd_cta"], 4, 1) in bwd, bwd  # the staged backward, a cluster of four
    assert {cl for g, cl, st in bwd if st} >= {1, 2, 4, 16}, bwd  # one CTA, and clusters of 2 and 16
    # 2-byte elements (the weight and grad_weight's sums in registers) and 4-byte ones (the sums alone), the
    # latter also at twice the vectors a thread, a row in registers while the next one is copied in
    assert {w for (v, r, w), p in zip(fast, plans) if p["b_staged"]} == {2, 4}, fast
    assert any(w == 4 and p["b_staged"] and p["b_vpt"] == 2 * staged_cta["bwd_vpt"]
               for (v, r, w), p in zip(fast, plans)), fast
    assert any(p["f_split"] for p in plans) and any(p["b_split"] and p["b_units"] > 1 for p in plans), plans
    assert any(c.dtype == "float64" and c.rows for c in cases) and any(
        c.dtype != "float64" and c.n % vec(c) for c in cases)  # the fallback
    assert {c.layout for c in cases} >= {"offset", "padded", "transposed"}  # staged copies, a contiguous copy
    assert {c.dtype for c in cases if c.rows == 0} == {"bfloat16", "float64"}  # zero rows: fast path and fallback


def test_the_racecheck_mutants_path_cases_reach_their_code(tmp_path):
    """A racy mutant is sanitized on its sanitize_paths alone (racecheck on every case took minutes):
    those cases must reach the code it breaks. The fallback's block reduce runs where a case is not
    whole 16-byte vectors or is float64, with several warps; the fast path's warp slots where a row's
    group spans several warps."""
    from harness.mutants import catalogue as mutants
    from harness.judging.cases import DTYPES
    from harness.tools.sanitize import PATHS, sample

    def vec(c):
        return 16 // DTYPES[c.dtype].itemsize

    def fallback(c):
        return c.rows > 0 and (c.dtype == "float64" or c.n % vec(c) != 0)

    chosen = {m.name: m.sanitize_paths for m, tool in mutants.sanitizer_checks() if tool == "racecheck"}
    assert set(chosen) == {"cuda_reduce_barrier_missing", "fast_reduce_barrier_missing",
                           "fast_slots_single_buffered", "fast_staged_copy_not_awaited",
                           "fast_dw_reduce_barrier_missing", "fast_staged_bwd_copy_not_awaited",
                           "fast_dw_runs_barrier_missing"}
    # The cluster exchange's race (a store into a peer that may not have started) is named as judged
    # by nothing since the totals go by st.async, which racecheck does not check.
    assert [m.name for m in mutants.unjudged()] == ["cluster_entry_wait_missing"]
    for name, paths in chosen.items():
        assert paths and all(0 <= i < len(PATHS) for i in paths), (name, paths)
    cases = sample()
    # A case is the same whichever others are chosen (the seeds and eps do not shift).
    assert sample(paths=(6, 7)) == [cases[6], cases[7]]
    assert any(fallback(cases[i]) and cases[i].n > 32 * vec(cases[i]) for i in chosen["cuda_reduce_barrier_missing"])
    fast = {i: cases[i].n // vec(cases[i]) for i in range(len(cases)) if not fallback(cases[i]) and cases[i].rows}
    plan = dict(zip(fast, _plans_of(tmp_path, [(fast[i], cases[i].rows, DTYPES[cases[i].dtype].itemsize)
                                               for i in fast])))
    warps = [i for i in chosen["fast_reduce_barrier_missing"] if i in plan
             and max(plan[i]["f_group"], plan[i]["b_group"]) > 32]
    assert warps, {i: plan.get(i) for i in chosen["fast_reduce_barrier_missing"]}
    # Backward units that take a second pass, with rows of several warps (the slots' parity matters).
    twice = [i for i in chosen["fast_slots_single_buffered"] if i in plan and plan[i]["b_group"] > 32
             and cases[i].rows > plan[i]["b_units"] * plan[i]["b_unit_groups"]]
    assert twice, {i: plan.get(i) for i in chosen["fast_slots_single_buffered"]}
    assert all(i in plan and plan[i]["f_staged"] for i in chosen["fast_staged_copy_not_awaited"])  # staged forwards
    # staged backwards (2-byte elements, their sums in registers), one whose units take several rows
    staged_bwd = chosen["fast_staged_bwd_copy_not_awaited"]
    assert all(i in plan and plan[i]["b_staged"] for i in staged_bwd), {i: plan.get(i) for i in staged_bwd}
    assert any(cases[i].rows > plan[i]["b_units"] for i in staged_bwd), staged_bwd
    # grad_weight's reduce of many partial rows (more than rmsnorm_dw.cu's kFewUnits, 64): the one with a barrier.
    assert any(i in plan and plan[i]["b_units"] > 64 for i in chosen["fast_dw_reduce_barrier_missing"]), {
        i: plan.get(i) for i in chosen["fast_dw_reduce_barrier_missing"]}
    # ... and of few (3 to 64: runs of two units, a warp a run, so two warps or more): the other barrier.
    assert any(i in plan and 3 <= plan[i]["b_units"] <= 64 for i in chosen["fast_dw_runs_barrier_missing"]), {
        i: plan.get(i) for i in chosen["fast_dw_runs_barrier_missing"]}


def test_sanitize_paths_are_checked():
    from harness.tools.sanitize import PATHS, parse_paths

    assert parse_paths("6,7") == (6, 7) and parse_paths(None) == ()
    for bad in ("6;7", f"{len(PATHS)}", "-1"):
        with pytest.raises(ValueError, match="path case|--paths"):
            parse_paths(bad)


def _fixed_groups(text: str, launcher: str, constants: dict[str, int]) -> set[tuple[bool, int, int]]:
    """(cluster, vpt, group) of each register kernel the launcher `launcher` of rmsnorm_rows.cuh builds
    with its row group fixed (its with_group calls: the kCluster branch first, then the others); a vpt
    spelled plan::kName is the value of kName in constants."""
    body = text.split(f"cudaError_t {launcher}(const plan::Plan& p", 1)[1].split("\n}\n", 1)[0]
    clustered, plain = body.split("if constexpr (kCluster) {", 1)[1].split("} else {", 1)
    out = set()
    for cluster, part in ((True, clustered), (False, plain)):
        for vpt, groups in re.findall(r"integral_constant<int, ([\w:]+)>\{\}, go, Groups<([\d, ]*)>", part):
            v = int(vpt) if vpt.isdigit() else constants[vpt.removeprefix("plan::")]
            out |= {(cluster, v, int(g)) for g in groups.replace(" ", "").split(",") if g}
    return out


def test_every_register_group_of_a_warp_or_more_has_a_kernel_with_it_fixed(plans):
    # plan::FixedGroup: the register kernels are built with their row group as a compile-time constant for
    # the groups of 32 to 1024 threads their plans make with 2 or more vectors a thread (rows of 33
    # vectors or more); a plan's group missing from the launchers' lists would run the kernel that reads
    # it at run time (correct, but slower: the compiler cannot unroll the loops over the group's warps).
    # Rows of 17 to 32 vectors (a warp of one vector a thread) and shorter ones (groups under a warp) still
    # read it at run time.
    constants = {name: int(value) for name, value in re.findall(
        r"constexpr int (k\w+) = (\d+);", (ROOT / "kernels" / "rmsnorm_plan.h").read_text())}
    text = (ROOT / "kernels" / "rmsnorm_rows.cuh").read_text()
    fixed = {"fwd": _fixed_groups(text, "forward", constants), "bwd": _fixed_groups(text, "backward", constants)}
    assert fixed["fwd"] and fixed["bwd"], fixed
    missing = set()
    for dir_, n_vec, group, vpt, cta, cluster, units, smem, staged, split in plans:
        if not (staged or split) and group >= 32 and vpt >= 2:
            key = (cluster > 1, vpt, group)
            if key not in fixed[dir_[:3]]:
                missing.add((dir_[:3], *key))
    assert not missing, f"register plans whose group no kernel has fixed (direction, cluster, vpt, group): {missing}"
