"""Every CUDA kernel fits the largest block it is launched with. The fallback's kernels and the fast
paths may run 1024 threads a block, which leaves a kernel at most 64 registers a thread (65,536 on
a Hopper multiprocessor); more, and the launch fails with "too many resources requested" on the GPU
only (the fallback's backward at 70 registers did, on the H200). ptxas reports the registers here,
on a machine without a GPU. The staged forward runs 256 threads a block (512 for the longest rows), the
split kernels 256, the staged backward 512."""

import re
import shutil
import subprocess

import pytest

from rmsnorm._buildenv import ROOT, find_cuda_home

REGISTERS_PER_SM = 65536
# The largest block each kernel is launched with: 1024 threads, but the staged kernels run CTAs of
# their plan's constant sizes, 256 threads forward (512 past a 16-CTA cluster of those) and 512 backward
# (kernels/rmsnorm_plan.h; tests/test_plan.py checks the plans keep to them), and the split kernels CTAs
# of 256 (kernels/rmsnorm_split.cu).
MAX_THREADS = {"fwd_staged_kernel": 512, "bwd_staged_kernel": 512, "split_sums_kernel": 256, "split_fwd_kernel": 256,
               "split_dx_kernel": 256}


def _nvcc():
    home = find_cuda_home()
    return str(ROOT.joinpath(home, "bin", "nvcc")) if home else shutil.which("nvcc")


@pytest.mark.skipif(_nvcc() is None, reason="needs nvcc (the CPU lane has the CUDA toolkit)")
@pytest.mark.parametrize("source", sorted(p.name for p in (ROOT / "kernels").glob("*.cu")))
def test_every_kernel_fits_the_largest_block_it_is_launched_with(source, tmp_path):
    # -cubin: the device code alone, as ptxas reports it; the host side is the build's (a third of the time)
    p = subprocess.run([_nvcc(), "-O3", "-std=c++17", "-gencode=arch=compute_90,code=sm_90", "-Xptxas", "-v", "-cubin",
                        str(ROOT / "kernels" / source), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    found = re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers", p.stderr, re.S)
    assert found or source == "rmsnorm_launch.cu", p.stderr[-2000:]
    def limit(name):
        threads = next((t for key, t in MAX_THREADS.items() if key in name), 1024)
        return REGISTERS_PER_SM // threads

    over = [(name, int(regs), limit(name)) for name, regs in found if int(regs) > limit(name)]
    assert not over, f"{source}: kernels over their register limit (name, registers, limit): {over}"
