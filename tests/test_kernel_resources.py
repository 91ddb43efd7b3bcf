"""Every CUDA kernel fits the largest block it is launched with. The fallback's kernels and the fast
paths may run 1024 threads a block, which leaves a kernel at most 64 registers a thread (65,536 on
a Hopper multiprocessor); more, and the launch fails with "too many resources requested" on the GPU
only (the fallback's backward at 70 registers did, on the H200). ptxas reports the registers here,
on a machine without a GPU."""

import re
import shutil
import subprocess

import pytest

from harness.build import ROOT, find_cuda_home

REGISTERS_AT_1024_THREADS = 65536 // 1024


def _nvcc():
    home = find_cuda_home()
    return str(ROOT.joinpath(home, "bin", "nvcc")) if home else shutil.which("nvcc")


@pytest.mark.skipif(_nvcc() is None, reason="needs nvcc (the CPU lane has the CUDA toolkit)")
@pytest.mark.parametrize("source", sorted(p.name for p in (ROOT / "kernels").glob("*.cu")))
def test_every_kernel_fits_a_block_of_1024_threads(source, tmp_path):
    p = subprocess.run([_nvcc(), "-O3", "-std=c++17", "-gencode=arch=compute_90,code=sm_90", "-Xptxas", "-v", "-c",
                        str(ROOT / "kernels" / source), "-o", str(tmp_path / "k.o")],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    found = re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers", p.stderr, re.S)
    assert found or source == "rmsnorm_launch.cu", p.stderr[-2000:]
    over = [(name, int(regs)) for name, regs in found if int(regs) > REGISTERS_AT_1024_THREADS]
    assert not over, f"{source}: kernels over {REGISTERS_AT_1024_THREADS} registers: {over}"
