"""Building mutants: the pristine sources are built once, with ``cpp_extension.load`` under one fixed module
name, in a tree of their own under ``.build/mutants/``; ninja's dependency log then says which files each
object was compiled from. A mutant is written into a scratch tree (one a build slot, so builds run side by
side), and only the objects compiled from a file it edits are compiled again, by the pristine ninja file's
own commands; the others are linked from the pristine build. The built library is kept per mutant, keyed by
the pristine sources, the edit and the toolchain, so a second run builds nothing."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

from harness.mutants.catalogue import BY_NAME, ORIGINAL, Mutant
from rmsnorm import _build as build
from rmsnorm import _buildenv as buildenv
import torch
import re
import json
from concurrent.futures import ThreadPoolExecutor


MODULE_NAME = "rmsnorm_mutant"


def apply(m: Mutant, files: dict[str, str]) -> dict[str, str]:
    """The mutated text of every file the mutant touches (files: relative path -> pristine text)."""
    out: dict[str, str] = {}
    for e in m.edits:
        text = out.get(e.file, files[e.file])
        found = text.count(e.old)
        if found != e.count:
            raise ValueError(f"mutant {m.name}: expected {e.count} occurrence(s) of its edit in {e.file}, "
                             f"but found {found}; the catalogue no longer matches the sources")
        out[e.file] = text.replace(e.old, e.new)
    return out


def _pristine_files() -> dict[str, str]:
    with_cuda, _ = build.cuda_build_possible()
    srcs = build.project_sources(with_cuda)
    files = {}
    for f in build.local_files(srcs):
        files[str(f.relative_to(buildenv.source_root()))] = f.read_text()
    return files


def _base_key(files: dict[str, str], with_cuda: bool) -> str:
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode())
        h.update(files[rel].encode())
    h.update(repr((with_cuda, build.cuda_arch_list() if with_cuda else "", torch.__version__,
                   str(torch.version.cuda), sys.version, build.toolchain_flags())).encode())
    return h.hexdigest()[:16]


def home() -> Path:
    """Where mutant builds and mutate runs live."""
    return buildenv.build_root() / "mutants"


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


_LOAD_SNIPPET = r"""
import os, sys
from torch.utils import cpp_extension
srcs, build_dir, with_cuda, cuda_flags = sys.argv[1].split(","), sys.argv[2], sys.argv[3] == "1", sys.argv[4].split()
cflags, ldflags = sys.argv[5].split(), sys.argv[6].split()
cpp_extension.load(name=%r, sources=srcs, build_directory=build_dir, with_cuda=with_cuda,
                   extra_cflags=["-O3"] + cflags, extra_cuda_cflags=cuda_flags, extra_ldflags=ldflags, verbose=False)
""" % MODULE_NAME


SLOT_ENV = "RMSNORM_MUTANT_SLOT"  # the scratch tree a build outside mutate uses (default 0)


def _cold_build(tree: Path, build_dir: Path, with_cuda: bool, name: str) -> None:
    """Every object of the tree's sources, by cpp_extension.load (its ninja file, its flags)."""
    build_dir.mkdir(parents=True, exist_ok=True)
    build.prepare_jit_env()
    env = dict(os.environ)
    if with_cuda:
        env["TORCH_CUDA_ARCH_LIST"] = build.cuda_arch_list()
    srcs = [str(tree / p.relative_to(buildenv.source_root())) for p in build.project_sources(with_cuda)]
    # -lineinfo always: it does not change the code, and compute-sanitizer then names lines.
    cflags, ldflags = build.toolchain_flags()
    p = subprocess.run([sys.executable, "-c", _LOAD_SNIPPET, ",".join(srcs), str(build_dir),
                        "1" if with_cuda else "0", " ".join(build._cuda_flags(True)), " ".join(cflags),
                        " ".join(ldflags)],
                       env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"mutant {name} did not build:\n{(p.stdout + p.stderr)[-4000:]}")


class NinjaFile:
    """The parts of cpp_extension's build.ninja that rebuild one object or relink: its variables,
    each rule's command, and each output's rule and input."""

    def __init__(self, text: str) -> None:
        self.vars: dict[str, str] = {}
        self.rules: dict[str, str] = {}
        self.builds: dict[str, tuple[str, list[str]]] = {}
        rule = None
        for line in text.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line.startswith((" ", "\t")):
                key, _, value = line.strip().partition(" = ")
                if rule is not None and key == "command":
                    self.rules[rule] = value
                continue
            rule = None
            if line.startswith("rule "):
                rule = line.split()[1]
            elif line.startswith("build "):
                outs, _, rest = line[len("build "):].partition(": ")
                rule_name, *ins = rest.split()
                self.builds[outs.strip()] = (rule_name, ins)
            elif " = " in line:
                key, _, value = line.partition(" = ")
                self.vars[key.strip()] = value

    def command(self, output: str, *, inputs: list[str], out: str) -> str:
        """The shell command that makes ``output`` from ``inputs`` into ``out``."""
        rule, _ = self.builds[output]
        cmd = self.rules[rule].replace("$in", " ".join(inputs)).replace("$out", out)
        return re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda mo: self.vars.get(mo.group(1) or mo.group(2), ""), cmd)


def ninja_deps(build_dir: Path, tree: Path) -> dict[str, list[str]]:
    """For each object, the files of the tree it was compiled from (ninja's dependency log, which
    the compilers' depfiles filled), relative to the tree."""
    p = subprocess.run(["ninja", "-C", str(build_dir), "-t", "deps"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"ninja -t deps failed in {build_dir}: {(p.stdout + p.stderr)[-500:]}")
    root = os.path.normpath(str(tree)) + os.sep
    deps: dict[str, list[str]] = {}
    current = None
    for line in p.stdout.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            current = line.split(":", 1)[0].strip()
            deps[current] = []
        elif current is not None:
            path = os.path.normpath(line.strip())
            if path.startswith(root):
                deps[current].append(path[len(root):])
    return deps


class Pristine:
    """The pristine sources built once: their tree, build folder, ninja file and dependency map."""

    def __init__(self, tree: Path, build_dir: Path, ninja: NinjaFile, deps: dict[str, list[str]]) -> None:
        self.tree, self.build_dir, self.ninja, self.deps = tree, build_dir, ninja, deps


def _pristine_build(base: str, files: dict[str, str], with_cuda: bool) -> Pristine:
    tree, build_dir = home() / f"tree-{base}-pristine", home() / f"build-{base}-pristine"
    done = build_dir / "deps.json"
    with buildenv.file_lock(home() / f"lock-{base}-pristine"):
        if not done.exists():
            for rel, text in files.items():
                _write_if_changed(tree / rel, text)
            _cold_build(tree, build_dir, with_cuda, ORIGINAL.name)
            deps = ninja_deps(build_dir, tree)
            if not deps:
                raise RuntimeError(f"ninja recorded no dependencies in {build_dir}")
            done.write_text(json.dumps(deps))
    return Pristine(tree, build_dir, NinjaFile((build_dir / "build.ninja").read_text()), json.loads(done.read_text()))


def _incremental_build(m: Mutant, files: dict[str, str], tree: Path, build_dir: Path, pristine: Pristine) -> None:
    """The objects compiled from a file the mutant edits, compiled again from its tree by the
    pristine ninja file's commands; the library linked from those and the pristine other objects."""
    mutated = apply(m, files)
    changed = {rel for rel, text in mutated.items() if text != files[rel]}
    for rel, text in files.items():
        _write_if_changed(tree / rel, mutated.get(rel, text))
    build_dir.mkdir(parents=True, exist_ok=True)
    ninja = pristine.ninja
    objects = [o for o, (rule, _) in ninja.builds.items() if rule != "link"]
    redo = [o for o in objects if changed & set(pristine.deps.get(o, ()))]
    if changed and not redo:
        raise RuntimeError(f"mutant {m.name} edits {', '.join(sorted(changed))}, from which no object is compiled")
    src_root = os.path.normpath(str(pristine.tree)) + os.sep

    def compile_one(obj: str) -> None:
        _, ins = ninja.builds[obj]
        srcs = [str(tree / os.path.normpath(i)[len(src_root):]) if os.path.normpath(i).startswith(src_root) else i
                for i in ins]
        cmd = ninja.command(obj, inputs=srcs, out=str(build_dir / obj))
        p = subprocess.run(cmd, shell=True, cwd=build_dir, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"mutant {m.name} did not build ({obj}):\n{(p.stdout + p.stderr)[-4000:]}")

    with ThreadPoolExecutor(max_workers=max(1, len(redo))) as pool:
        list(pool.map(compile_one, redo))
    link = next(o for o, (rule, _) in ninja.builds.items() if rule == "link")
    _, ins = ninja.builds[link]
    objs = [str(build_dir / o) if o in redo else str(pristine.build_dir / o) for o in ins]
    p = subprocess.run(ninja.command(link, inputs=objs, out=str(build_dir / link)), shell=True, cwd=build_dir,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"mutant {m.name} did not link:\n{(p.stdout + p.stderr)[-4000:]}")


def builds_cuda(device: str) -> bool:
    """Whether a mutant judged on device is built with the CUDA sources: where a toolkit is, for a
    CUDA device; never for the CPU, where that code does not run (the CPU lane compiled every
    kernel of the pristine tree for nothing: about half of its CPU-seconds). The C++ of a CPU-only
    build is the same source compiled with the same flags."""
    return device != "cpu" and build.cuda_build_possible()[0]


def build_mutant(m: Mutant, *, device: str, log=None, slot: int | None = None) -> tuple[Path, float]:
    """Build (or find) the mutant's library for device; returns (path, seconds spent building).
    Builds in different slots use different scratch trees, so they can run at the same time (the
    GPU lane's sanitize step builds its mutants in a slot of its own, beside mutate's)."""
    say = log or (lambda s: print(s, file=sys.stderr, flush=True))
    if slot is None:
        slot = int(os.environ.get(SLOT_ENV, "0"))
    with_cuda = builds_cuda(device)
    files = _pristine_files()
    base = _base_key(files, with_cuda)
    out = home() / f"lib-{base}" / f"{m.name}-{m.key()}" / f"{MODULE_NAME}.so"
    if out.exists():
        return out, 0.0
    tree = home() / f"tree-{base}-{slot}"
    build_dir = home() / f"build-{base}-{slot}"
    t0 = time.perf_counter()
    pristine = _pristine_build(base, files, with_cuda)
    with buildenv.file_lock(home() / f"lock-{base}-{slot}"):
        if out.exists():
            return out, 0.0
        _incremental_build(m, files, tree, build_dir, pristine)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".so.tmp")
        shutil.copyfile(build_dir / f"{MODULE_NAME}.so", tmp)
        os.replace(tmp, out)
    dt = time.perf_counter() - t0
    say(f"rmsnorm: built mutant {m.name} in {dt:.1f} s")
    return out, dt


def load(name: str, device: str) -> ModuleType:
    """Build if needed and import a mutant's library for device (it registers torch.ops.rmsnorm)."""
    m = BY_NAME.get(name)
    if m is None:
        raise ValueError(f"unknown mutant {name!r}; expected one of: {', '.join(BY_NAME)}")
    path, _ = build_mutant(m, device=device)
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[MODULE_NAME] = module
    return module
