"""Every CUDA kernel fits the largest block it is launched with. The fallback's kernels and the fast
paths may run 1024 threads a block, which leaves a kernel at most 64 registers a thread (65,536 on
a Hopper multiprocessor); more, and the launch fails with "too many resources requested" on the GPU
only (the fallback's backward at 70 registers did, on the H200). ptxas reports the registers here,
on a machine without a GPU. The staged forward runs 256 threads a block (512 for the longest rows), the
split kernels 256, the staged backward 512.

These compiles are also where the CPU lane compiles the CUDA code: without a GPU the project is built
without its CUDA kernels (rmsnorm._build.project_spec), so each .cu's device code is compiled here, the
launcher's file (the host code that chooses a path) whole, and binding/rmsnorm_cuda.cpp against torch's
headers."""

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


# What torch.utils.cpp_extension adds to every nvcc command of a build (its half types without implicit
# conversions: a kernel that relied on them would compile here and not there).
TORCH_NVCC_FLAGS = ("-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr")


def _nvcc():
    home = find_cuda_home()
    return str(ROOT.joinpath(home, "bin", "nvcc")) if home else shutil.which("nvcc")


@pytest.mark.skipif(_nvcc() is None, reason="needs nvcc (the CPU lane has the CUDA toolkit)")
@pytest.mark.parametrize("source", sorted(p.name for p in (ROOT / "kernels").glob("*.cu")))
def test_every_kernel_fits_the_largest_block_it_is_launched_with(source, tmp_path):
    # With the flags torch's build gives nvcc (the CPU lane's build leaves the CUDA kernels out). -cubin: the device
    # code alone, as ptxas reports it; the launcher's file, where the host code is, compiled whole (-c).
    whole = source == "rmsnorm_launch.cu"
    p = subprocess.run([_nvcc(), "-O3", "-std=c++20", *TORCH_NVCC_FLAGS, "-gencode=arch=compute_90,code=sm_90",
                        "-Xptxas", "-v", "-c" if whole else "-cubin",
                        str(ROOT / "kernels" / source), "-o", str(tmp_path / ("k.o" if whole else "k.cubin"))],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    found = re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers", p.stderr, re.S)
    assert found or source == "rmsnorm_launch.cu", p.stderr[-2000:]
    def limit(name):
        threads = next((t for key, t in MAX_THREADS.items() if key in name), 1024)
        return REGISTERS_PER_SM // threads

    over = [(name, int(regs), limit(name)) for name, regs in found if int(regs) > limit(name)]
    assert not over, f"{source}: kernels over their register limit (name, registers, limit): {over}"


@pytest.mark.skipif(_nvcc() is None, reason="needs the CUDA toolkit's headers (the CPU lane has them)")
def test_the_cuda_binding_compiles(tmp_path):
    # The dispatch onto the launchers, which a CUDA build alone compiles; -O0: a check that it compiles.
    import torch
    from torch.utils import cpp_extension

    home = find_cuda_home()
    cmd = ["c++", "-std=c++20", "-O0", "-fPIC", "-c", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
           *(f"-I{p}" for p in cpp_extension.include_paths()), f"-I{ROOT.joinpath(home, 'include')}",
           str(ROOT / "binding" / "rmsnorm_cuda.cpp"), "-o", str(tmp_path / "rmsnorm_cuda.o")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
