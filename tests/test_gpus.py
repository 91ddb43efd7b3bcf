"""harness.running.gpus: independent processes claim the least-held GPU; a dead process's claim is dropped."""

import os
import subprocess
import sys

from harness.running import gpus
from rmsnorm._buildenv import ROOT

HOLD = "import sys, time; from harness.running import gpus; print(gpus.claim(2), flush=True); time.sleep(30)"


def test_processes_spread_over_the_gpus_and_dead_claims_are_dropped(tmp_path, monkeypatch):
    monkeypatch.setenv(gpus.CLAIMS_ENV, str(tmp_path))
    env = {"PYTHONPATH": str(ROOT), gpus.CLAIMS_ENV: str(tmp_path)}
    held = []
    try:
        for want in (0, 1, 0):  # two GPUs: 0, 1, then the one fewer hold (a tie: the lower)
            p = subprocess.Popen([sys.executable, "-c", HOLD], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
            held.append(p)
            assert int(p.stdout.readline()) == want
        held[1].kill()
        held[1].wait()
        assert gpus.claim(2) == 1  # GPU 1's only holder died: its claim no longer counts
        assert (tmp_path / f"gpu1-pid{os.getpid()}").exists()
    finally:
        for p in held:
            p.kill()
            p.wait()


def test_several_processes_a_gpu_as_the_cores_allow():
    from harness.running.gpus import default_processes

    assert default_processes("cuda", cores=32, gpus=2) == 8  # 4 a GPU, 2 cores each
    assert default_processes("cuda", cores=16, gpus=1) == 4
    assert default_processes("cuda", cores=4, gpus=2) == 2  # at least one a GPU
    assert default_processes("cpu", cores=2) == 1  # the CI machine: no side-by-side processes
    assert default_processes("cpu", cores=16) == 4
