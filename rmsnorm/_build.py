"""Building C++/CUDA RMSNorm extensions with ``torch.utils.cpp_extension.load`` (JIT).

One source list (``sources.txt``) serves this JIT build and CMake. Each build lives in a
directory keyed by everything that changes its output (sources and headers, flags, torch
version, CUDA arch, Python version), so two targets never collide and an unchanged tree never
rebuilds.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

from rmsnorm import _toolchain
from rmsnorm._buildenv import (LOAD_LOCK, build_root, clear_stale_torch_lock, file_lock, prepare_cuda_home,
                               source_root)

# torch.utils.cpp_extension warns "No CUDA runtime is found" on import wherever there is no GPU; a build
# says in one line which kernels it built.
logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
from torch.utils import cpp_extension  # noqa: E402

SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".cu")
HEADER_SUFFIXES = (".h", ".hpp", ".cuh", ".inl")
DEFAULT_ARCH = "9.0"  # the H200 this project targets, used when there is no GPU to ask
# Kernel settings to build the project with instead of its defaults (kernels/rmsnorm_plan.h and
# rmsnorm_device.cuh name them), for comparing them: "RMSNORM_PDL=1 RMSNORM_FWD_STAGED_FROM=0".
DEFINES_ENV = "RMSNORM_KERNEL_DEFINES"
# Written in a build's folder once it compiled and imported (the module's name): a later run that
# finds it need not start a process to check the build (harness.cli.preflight).
READY_STAMP = "ready"


BUILD_ENV = "RMSNORM_BUILD"
BUILD_MODES = ("auto", "cpu", "cuda")


def build_mode() -> str:
    """RMSNORM_BUILD: auto (the project's CUDA kernels where a GPU is visible), cpu, or cuda (compiled even
    without a GPU, as a check that they compile)."""
    mode = os.environ.get(BUILD_ENV, "auto") or "auto"
    if mode not in BUILD_MODES:
        raise ValueError(f"{BUILD_ENV}: expected one of {', '.join(BUILD_MODES)}, but got {mode!r}")
    return mode


def cuda_build_possible() -> tuple[bool, str]:
    """Whether CUDA sources can be compiled here, and why not when they cannot."""
    if build_mode() == "cpu":
        return False, f"{BUILD_ENV}=cpu"
    if torch.version.cuda is None:
        return False, f"torch {torch.__version__} is a CPU-only build"
    if prepare_cuda_home() is None:
        return False, "no CUDA toolkit (nvcc and cuda_runtime.h) found"
    return True, ""


def prepare_jit_env() -> bool:
    """For a plain ``cpp_extension.load`` call: point CUDA_HOME at a real toolkit and, when no
    GPU can be asked, set TORCH_CUDA_ARCH_LIST to sm_90. Returns whether CUDA can be built."""
    with_cuda, _ = cuda_build_possible()
    if with_cuda and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        os.environ["TORCH_CUDA_ARCH_LIST"] = cuda_arch_list()
    return with_cuda


def cuda_arch_list() -> str:
    """The arch list to compile for: the visible GPUs, else sm_90."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    if torch.cuda.is_available():
        caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
        return ";".join(f"{a}.{b}" for a, b in caps)
    return DEFAULT_ARCH


def project_sources(with_cuda: bool, python_module: bool = True) -> list[Path]:
    """The project's sources from sources.txt, for a CUDA or a CPU-only build."""
    out = []
    base = source_root()
    source_list = base / "sources.txt"
    for line in source_list.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        kind, path = line.split()
        if kind not in ("core", "cuda", "python"):
            raise ValueError(f"{source_list}: unknown source kind {kind!r} in line {line!r}")
        if (kind == "cuda" and not with_cuda) or (kind == "python" and not python_module):
            continue
        out.append(base / path)
    return out


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def local_files(sources) -> list[Path]:
    """The sources and every file they pull in with #include "..." (found relative to the
    including file), recursively: what a rebuild depends on beyond torch and the toolkit."""
    out: list[Path] = []
    seen: set[Path] = set()
    todo = [Path(s).resolve() for s in sources]
    while todo:
        f = todo.pop(0)
        if f in seen or not f.is_file():
            continue
        seen.add(f)
        out.append(f)
        for inc in _INCLUDE.findall(f.read_text(errors="replace")):
            todo.append((f.parent / inc).resolve())
    return out


@dataclass(frozen=True)
class BuildSpec:
    """What to build: sources, flags and the name prefix of the module."""

    sources: tuple[Path, ...]
    name_prefix: str
    with_cuda: bool
    extra_cflags: tuple[str, ...] = ("-O3",)
    extra_cuda_cflags: tuple[str, ...] = ("-O3",)
    defines: tuple[str, ...] = ()

    def key(self) -> str:
        h = hashlib.sha256()
        for f in local_files(self.sources):
            h.update(f.name.encode())
            h.update(f.read_bytes())
        h.update(repr((self.with_cuda, self.extra_cflags, self.extra_cuda_cflags, self.defines,
                       toolchain_flags())).encode())
        h.update(torch.__version__.encode())
        h.update(sys.version.encode())
        if self.with_cuda:
            h.update(cuda_arch_list().encode())
            h.update(str(torch.version.cuda).encode())
        return h.hexdigest()[:16]


def _module_name(spec: BuildSpec, key: str) -> str:
    """The name the module must be imported under: the sources' literal PYBIND11_MODULE name
    when they hard-code one, else a content-keyed name passed as TORCH_EXTENSION_NAME."""
    for src in spec.sources:
        m = re.search(r"PYBIND11_MODULE\s*\(\s*(\w+)", src.read_text(errors="replace"))
        if m and m.group(1) != "TORCH_EXTENSION_NAME":
            return m.group(1)
    return f"{spec.name_prefix}_{key}"


def build_dir_of(spec: BuildSpec, key: str | None = None) -> Path:
    """The folder a build of spec lives in (keyed by spec.key())."""
    return build_root() / f"{spec.name_prefix}-{key or spec.key()}"


def build(spec: BuildSpec, *, verbose: bool = False, log=None) -> ModuleType:
    """Compile (or reuse) and import the extension described by spec."""
    prepare_cuda_home()

    key = spec.key()
    name = _module_name(spec, key)
    build_dir = build_dir_of(spec, key)
    build_dir.mkdir(parents=True, exist_ok=True)
    cold = not any(build_dir.glob("*.so"))
    what = f"CUDA sm_{cuda_arch_list().replace('.', '').replace(';', ',sm_')} + CPU" if spec.with_cuda else "CPU only"
    say = log or (lambda s: print(s, file=sys.stderr, flush=True))
    if cold:
        say(f"rmsnorm: building {name} ({what}) in {build_dir} ...")
    old_arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if spec.with_cuda:
        os.environ["TORCH_CUDA_ARCH_LIST"] = cuda_arch_list()
    t0 = time.perf_counter()
    fix_cflags, fix_ldflags = toolchain_flags()
    try:
        # Every load of a build folder holds its load lock, which the system releases when the
        # holder dies: a torch lock file found meanwhile is stale (clear_stale_torch_lock).
        with file_lock(build_dir / LOAD_LOCK):
            clear_stale_torch_lock(build_dir, say)
            module = cpp_extension.load(
                name=name,
                sources=[str(s) for s in spec.sources],
                extra_cflags=list(spec.extra_cflags) + list(fix_cflags) + [f"-D{d}" for d in spec.defines],
                extra_ldflags=list(fix_ldflags),
                extra_cuda_cflags=list(spec.extra_cuda_cflags) + [f"-D{d}" for d in spec.defines],
                build_directory=str(build_dir),
                with_cuda=spec.with_cuda,
                verbose=verbose,
            )
    finally:
        if spec.with_cuda:
            if old_arch is None:
                os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
            else:
                os.environ["TORCH_CUDA_ARCH_LIST"] = old_arch
    if cold:
        say(f"rmsnorm: built {name} in {time.perf_counter() - t0:.1f} s")
    stamp = build_dir / READY_STAMP
    if not stamp.is_file():
        stamp.write_text(name)
    return module


def built_before(spec: BuildSpec) -> str | None:
    """The module name of a build of spec (the same sources, headers, flags, torch and Python: its
    key) that compiled and imported here before, or None."""
    build_dir = build_dir_of(spec)
    stamp = build_dir / READY_STAMP
    if stamp.is_file() and any(build_dir.glob("*.so")):
        return stamp.read_text().strip() or None
    return None


def toolchain_flags() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The C++ and linker flags that make this machine's toolchain raise rather than crash
    (rmsnorm._toolchain; empty until it has been probed, and on a sound toolchain)."""
    return _toolchain.fix_flags()


def _cuda_flags(lineinfo: bool | None) -> tuple[str, ...]:
    """nvcc flags; -lineinfo (for compute-sanitizer) when asked or RMSNORM_LINEINFO=1."""
    if lineinfo is None:
        lineinfo = os.environ.get("RMSNORM_LINEINFO", "0") == "1"
    return ("-O3", "-lineinfo") if lineinfo else ("-O3",)


def project_spec(*, lineinfo: bool | None = None) -> tuple[BuildSpec, str]:
    """The project's own extension, CUDA when possible and a GPU is there to run it (or RMSNORM_BUILD=cuda);
    with the one-line reason otherwise. Without a GPU its CUDA kernels could not run, and compiling them
    is most of the build (tests/test_kernel_resources.py compiles them on the CPU lane)."""
    with_cuda, why = cuda_build_possible()
    if with_cuda and build_mode() == "auto" and not torch.cuda.is_available():
        with_cuda, why = False, f"no CUDA device here; {BUILD_ENV}=cuda compiles the CUDA kernels too"
    defines = tuple(d for d in os.environ.get(DEFINES_ENV, "").replace(",", " ").split() if d)
    for d in defines:
        if not re.fullmatch(r"RMSNORM_[A-Z0-9_]+(=-?\w+)?", d):
            raise ValueError(f"{DEFINES_ENV}: expected NAME=VALUE settings of the kernels (RMSNORM_...), but got {d!r}")
    spec = BuildSpec(
        sources=tuple(project_sources(with_cuda)),
        name_prefix="rmsnorm_ext",
        with_cuda=with_cuda,
        extra_cuda_cflags=_cuda_flags(lineinfo),
        defines=defines,
    )
    note = "CUDA and CPU kernels" if with_cuda else f"CPU-only build ({why})"
    if defines:
        note += f", built with {' '.join(defines)}"
    return spec, note


def sources_spec(paths: list[Path], *, name_prefix: str = "rmsnorm_target") -> BuildSpec:
    """A target given as source files (or folders of them)."""
    files: list[Path] = []
    for p in paths:
        p = Path(p).resolve()
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.suffix in SOURCE_SUFFIXES)
            if not found:
                raise ValueError(f"target folder {p} holds no .cpp/.cu sources")
            files += found
        elif p.is_file():
            if p.suffix not in SOURCE_SUFFIXES:
                raise ValueError(f"target source {p} is not a .cpp/.cc/.cxx/.cu file")
            files.append(p)
        else:
            raise ValueError(f"target source {p} does not exist")
    with_cuda = any(f.suffix == ".cu" for f in files)
    if with_cuda:
        ok, why = cuda_build_possible()
        if not ok:
            raise RuntimeError(f"target has CUDA sources but they cannot be compiled here: {why}")
    return BuildSpec(sources=tuple(files), name_prefix=name_prefix, with_cuda=with_cuda,
                     extra_cuda_cflags=_cuda_flags(None))
