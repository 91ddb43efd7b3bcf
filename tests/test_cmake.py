"""The CMake route: the same sources build against libtorch, and CTest passes (a C++ program
calling the operator through the dispatcher, and torch.ops.load_library from Python)."""

import subprocess
import sys

import pytest
import torch

from rmsnorm._buildenv import ROOT


@pytest.mark.slow("a CMake build of every source against libtorch (44 s alone as a unity build, 71 s without)")
def test_cmake_build_and_ctest():
    # A unity build (CMake's CMAKE_UNITY_BUILD, the developer's choice by CMake's own rule, so not set in
    # CMakeLists.txt): the C++ sources compiled as one translation unit and the CUDA sources as another,
    # each header parsed once: on the 2-core CI machine 67 CPU-s against 115 for a source at a time. Each
    # source alone, C++20 and all, is compiled by the session's JIT build in every run of the suite.
    # Where no GPU is, the C++ route alone (RMSNORM_WITH_CUDA=OFF): the CUDA sources are compiled in the same
    # run by the session's JIT build and, one file at a time, by tests/test_kernel_resources.py's ptxas, and
    # nothing built here could run them.
    build = ROOT / ".build" / ("cmake" if torch.cuda.is_available() else "cmake-cpu")
    cuda = [] if torch.cuda.is_available() else ["-DRMSNORM_WITH_CUDA=OFF"]
    cfg = subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
                          f"-DPython3_EXECUTABLE={sys.executable}", "-DCMAKE_UNITY_BUILD=ON", *cuda],
                         capture_output=True, text=True)
    assert cfg.returncode == 0, cfg.stdout + cfg.stderr
    b = subprocess.run(["cmake", "--build", str(build), "-j2"], capture_output=True, text=True)
    assert b.returncode == 0, b.stdout[-4000:] + b.stderr[-4000:]
    t = subprocess.run(["ctest", "--test-dir", str(build), "--output-on-failure"], capture_output=True, text=True)
    assert t.returncode == 0 and "100% tests passed" in t.stdout, t.stdout + t.stderr
