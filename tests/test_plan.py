"""kernels/rmsnorm_plan.h: every planned layout covers its row, wastes less than half of it, and
fits the hardware; the plan is a function of the row length alone (its signature takes nothing
else), which is what makes the fast paths batch invariant. Compiled and run as plain C++."""

import shutil
import subprocess

import pytest

from harness.build import ROOT

PROGRAM = r"""
#include <cstdio>
#include "rmsnorm_plan.h"
using namespace rmsnorm::plan;
static void show(const char* dir, long n_vec, const Plan& p, long rows) {
  std::printf("%s %ld %d %d %d %d %ld %d\n", dir, n_vec, p.group, p.vpt, p.cta, p.cluster,
              p.ok() ? (dir[0] == 'f' ? forward_units(p, rows) : backward_units(p, rows)) : 0L, int(p.staged));
}
int main() {
  long rows_list[3] = {1, 4097, 1L << 22};
  for (long n_vec = 1; n_vec <= 140000; n_vec += (n_vec < 2100 ? 1 : 97)) {
    for (long rows : rows_list) {
      show("fwd", n_vec, forward_plan(n_vec), rows);
      show("bwd", n_vec, backward_plan(n_vec), rows);
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


# The plans of rows given as (16-byte vectors, rows): one line each of the forward plan's group,
# cluster, staged and the backward plan's group, cluster, staged, units over those rows, warps a unit.
PLAN_OF = (
    '#include <cstdio>\n#include <cstdlib>\n#include "rmsnorm_plan.h"\nusing namespace rmsnorm::plan;\n'
    'int main(int argc, char** argv) {\n  for (int i = 1; i + 1 < argc; i += 2) {\n'
    '    long v = std::atol(argv[i]), rows = std::atol(argv[i + 1]);\n'
    '    Plan f = forward_plan(v), b = backward_plan(v);\n'
    '    std::printf("%d %d %d %d %d %d %ld %d\\n", f.group, f.cluster, int(f.staged), b.group, b.cluster,'
    ' int(b.staged), long(backward_units(b, rows)), b.cta / b.group);\n  }\n}\n')
PLAN_FIELDS = ("f_group", "f_cluster", "f_staged", "b_group", "b_cluster", "b_staged", "b_units", "b_unit_groups")


def _plans_of(folder, rows_of: list[tuple[int, int]]) -> list[dict]:
    out = _run_plan_program(folder, PLAN_OF, *(str(a) for pair in rows_of for a in pair))
    return [dict(zip(PLAN_FIELDS, map(int, line.split()))) for line in out.splitlines() if line]


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    out = _run_plan_program(tmp_path_factory.mktemp("plan"), PROGRAM)
    rows = []
    for line in out.splitlines():
        dir_, *nums = line.split()
        rows.append((dir_, *map(int, nums)))
    return rows


def test_every_plan_covers_its_row_and_fits_the_hardware(plans):
    seen = set()
    for dir_, n_vec, group, vpt, cta, cluster, units, staged in plans:
        max_vpt = (16 if staged else 8) if dir_ == "fwd" else (8 if staged else 2)
        max_vectors = 1024 * 4 * 16 if dir_ == "fwd" else 1024 * 2 * 16
        if vpt == 0:
            assert n_vec > max_vectors, f"{dir_} n_vec={n_vec}: no plan, though a 16-CTA cluster could hold it"
            continue
        seen.add((dir_, cluster > 1))
        cap = group * vpt * cluster
        where = f"{dir_} n_vec={n_vec}: group {group}, vpt {vpt}, cta {cta}, cluster {cluster}, staged {staged}"
        assert group & (group - 1) == 0 and 1 <= group <= 1024, where
        assert vpt in (1, 2, 4, 8, 16) and vpt <= max_vpt, where
        if staged:  # the CTA's slab of the row (two rows of two tensors, and float sums, backward) in shared
            # memory: under the 227 KB a CTA may have; one row a CTA
            smem = group * vpt * 16 if dir_ == "fwd" else group * vpt * (2 * 2 * 16 + 8 * 4)
            assert cta == group <= 256 and smem <= 227 * 1024, where
        assert cta % group == 0 and cta <= 1024 and cta % 32 == 0, where
        assert cluster & (cluster - 1) == 0 and cluster <= 16, where
        assert cluster == 1 or cta == group, where  # one row per CTA of a cluster
        assert n_vec <= cap < 2 * n_vec, f"{where}: holds {cap} vectors"
        assert units >= 1, where
        if dir_ == "bwd" and not staged:  # the CTA's row groups hand their grad_weight sums over in shared memory
            assert (cta // group - 1) * vpt * 8 * group * 4 <= 48 * 1024, where
    assert seen == {("fwd", False), ("fwd", True), ("bwd", False), ("bwd", True)}


def test_backward_units_do_not_depend_on_the_device(plans):
    # A unit count is min(row groups, a constant): the same on every GPU, so is grad_weight's order.
    for dir_, n_vec, group, vpt, cta, cluster, units, staged in plans:
        if dir_ == "bwd" and vpt:
            assert units <= max(1, 132 * (1 if staged else 1024 // cta) // cluster), (n_vec, units)


def test_the_sanitizer_cases_reach_every_launch_path(tmp_path):
    """harness/sanitize.py runs compute-sanitizer on one case a path, not a random sample: together
    they reach the fallback, every forward and backward register regime, clusters of 4, 8 and 16
    forward and 8 and 16 backward, the staged forward and backward, aligned copies of misaligned rows,
    and zero rows."""
    from harness.cases import DTYPES
    from harness.sanitize import PATHS, sample

    cases = sample()
    assert len(cases) == len(PATHS)

    def vec(c):  # elements of a 16-byte vector
        return 16 // DTYPES[c.dtype].itemsize

    fast = [(c.n // vec(c), c.rows) for c in cases if c.dtype != "float64" and c.n % vec(c) == 0 and c.rows > 0]
    plans = _plans_of(tmp_path, fast)
    fwd = {(p["f_group"], p["f_cluster"], p["f_staged"]) for p in plans}
    bwd = {(p["b_group"], p["b_cluster"], p["b_staged"]) for p in plans}
    assert {cl for _, cl, st in fwd if st} >= {4, 8, 16}, fwd  # the staged forward in clusters
    assert {g for g, cl, st in fwd if cl == 1} >= {1, 32, 128, 256, 512}, fwd  # register rows, 1 to 512 threads
    assert {cl for g, cl, st in bwd if not st} >= {1, 8, 16} and (1024, 16, 0) in bwd, bwd  # register backward
    assert (256, 2, 1) in bwd, bwd  # the staged backward, a cluster of two
    assert any(c.dtype == "float64" and c.rows for c in cases) and any(
        c.dtype != "float64" and c.n % vec(c) for c in cases)  # the fallback
    assert {c.layout for c in cases} >= {"offset", "padded", "transposed"}  # staged copies, a contiguous copy
    assert {c.dtype for c in cases if c.rows == 0} == {"bfloat16", "float64"}  # zero rows: fast path and fallback


def test_the_racecheck_mutants_path_cases_reach_their_code(tmp_path):
    """A racy mutant is sanitized on its sanitize_paths alone (racecheck on all 12 cases took minutes):
    those cases must reach the code it breaks. The fallback's block reduce runs where a case is not
    whole 16-byte vectors or is float64, with several warps; the fast path's warp slots where a row's
    group spans several warps."""
    from harness import mutants
    from harness.cases import DTYPES
    from harness.sanitize import PATHS, sample

    def vec(c):
        return 16 // DTYPES[c.dtype].itemsize

    def fallback(c):
        return c.rows > 0 and (c.dtype == "float64" or c.n % vec(c) != 0)

    chosen = {m.name: m.sanitize_paths for m, tool in mutants.sanitizer_checks() if tool == "racecheck"}
    assert set(chosen) == {"cuda_reduce_barrier_missing", "fast_reduce_barrier_missing",
                           "fast_slots_single_buffered", "fast_staged_copy_not_awaited"}
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
    plan = dict(zip(fast, _plans_of(tmp_path, [(fast[i], cases[i].rows) for i in fast])))
    warps = [i for i in chosen["fast_reduce_barrier_missing"] if i in plan
             and max(plan[i]["f_group"], plan[i]["b_group"]) > 32]
    assert warps, {i: plan.get(i) for i in chosen["fast_reduce_barrier_missing"]}
    # Backward units that take a second pass, with rows of several warps (the slots' parity matters).
    twice = [i for i in chosen["fast_slots_single_buffered"] if i in plan and plan[i]["b_group"] > 32
             and cases[i].rows > plan[i]["b_units"] * plan[i]["b_unit_groups"]]
    assert twice, {i: plan.get(i) for i in chosen["fast_slots_single_buffered"]}
    assert all(i in plan and plan[i]["f_staged"] for i in chosen["fast_staged_copy_not_awaited"])  # staged forwards


def test_sanitize_paths_are_checked():
    from harness.sanitize import PATHS, parse_paths

    assert parse_paths("6,7") == (6, 7) and parse_paths(None) == ()
    for bad in ("6;7", f"{len(PATHS)}", "-1"):
        with pytest.raises(ValueError, match="path case|--paths"):
            parse_paths(bad)
