"""The CUDA code on main is the code the GPU lane judged: the git trees of kernels/, binding/ and
sources.txt equal those recorded in benchmarks/gpu-lane.md (harness.tools.lane computes them as git does),
and the recorded lane passed. The CPU lane cannot run CUDA: this is how it knows what ran."""

import os
import shutil
import subprocess

import pytest

from harness.tools import lane
from rmsnorm._buildenv import ROOT


def test_the_trees_are_computed_as_git_computes_them():
    if not shutil.which("git") or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to compare with")
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", *lane.GUARDED],
                           capture_output=True, text=True).stdout.strip()
    if dirty:
        pytest.skip(f"the guarded paths have uncommitted changes: {dirty.splitlines()[0]}")
    for name, tree in lane.tree_ids().items():
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", f"HEAD:{name}"], capture_output=True,
                              text=True).stdout.strip()
        assert tree == head, (name, tree, head)


def test_the_cuda_code_is_the_code_the_gpu_lane_ran():
    record = lane.RECORD.read_text()
    fields = lane.parse(record)
    for name, tree in lane.tree_ids().items():
        assert fields.get(name) == tree, (
            f"{name} is {tree[:12]} here, but the GPU lane ran {fields.get(name, 'nothing')[:12]} (commit "
            f"{fields.get('commit', '?')}): run `bash .ci/gpu-lane` on a GPU at this tree, or put {name} back")


def test_the_recorded_gpu_lane_passed():
    assert lane.mismatches(lane.RECORD.read_text(), lane.tree_ids()) == []


def test_a_record_of_other_trees_or_a_failed_lane_is_refused():
    current = lane.tree_ids()
    passed = "\n".join(["| verdict | PASSED |", "| commit | abc |"] + [f"| {k} | {v} |" for k, v in current.items()])
    assert lane.mismatches(passed, current) == []
    other = passed.replace(current["kernels"], "0" * 40)
    assert lane.mismatches(other, current) == [
        f"kernels is {current['kernels'][:12]} here, but the GPU lane passed 000000000000 (commit abc)"]
    assert lane.mismatches(passed.replace("PASSED", "FAILED"), current) == [
        "the recorded GPU lane did not pass (verdict 'FAILED')"]


@pytest.mark.parametrize("lane,slots", [
    ("", "slots: [paths gate] [mutate] [sanitize], then bench alone"),
    ("judge", "slots: [peers] [card] [sheet]"),
])
def test_the_lanes_run_their_groups_side_by_side(lane, slots):
    # Bash ignores assignments to GROUPS (its user's group ids): the lane once ran every step in one slot.
    env = {k: v for k, v in os.environ.items() if k not in ("STEPS", "LANE_GROUPS", "LAST", "SLOTS")}
    env.update(PLAN_ONLY="1", LOG_DIR=str(ROOT / ".build" / "gpu-lane-plan"), **({"STEPS": lane} if lane else {}))
    p = subprocess.run(["bash", str(ROOT / ".ci" / "gpu-lane")], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"gpu-lane: {slots}" in p.stdout.splitlines(), p.stdout
