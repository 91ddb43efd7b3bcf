"""Which target a run judges, parsed once at the edge (``--target``, RMSNORM_TARGET, a saved case's record)
into a value that knows its kind; every other module asks that value, never the string.

  project              this project's extension (the default)
  PATH[,PATH...]       C++/CUDA sources, or folders of them, built with cpp_extension.load
  module:NAME          an importable module that is already built
  mutant:NAME          this project's extension with one bug planted (harness.mutants.catalogue)
  peer:NAME            an RMSNorm people ship, from the reference panel (harness.running.peers)

A target offers the seed card's calls: forward(x, weight, eps) -> y or (y, inv_rms), and optionally
backward(grad_out, x, weight, inv_rms) -> (grad_x, grad_weight).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from dataclasses import dataclass
from importlib.machinery import PathFinder
from pathlib import Path

KINDS = ("project", "sources", "module", "mutant", "peer")
_PREFIXED = ("module", "mutant", "peer")
ENV = "RMSNORM_TARGET"
# What marks a module as Triton code: a kernel decorated with triton.jit (or jit imported from triton).
_TRITON_JIT = re.compile(r"\btriton\.jit\b|^\s*from\s+triton\s+import\s+[^\n]*\bjit\b", re.M)
# The peers whose kernels are Triton's (harness.running.peers): Liger-Kernel's.
_TRITON_PEERS = ("liger",)


@dataclass(frozen=True)
class TargetSpec:
    kind: str  # one of KINDS
    name: str = ""  # the module's, mutant's or peer's name
    paths: tuple[str, ...] = ()  # sources: absolute paths of files or folders

    @classmethod
    def parse(cls, text: "str | TargetSpec | None") -> "TargetSpec":
        """A spec from what a user gave (None or "": the project); ValueError with what was expected."""
        if isinstance(text, TargetSpec):
            return text
        text = (text or "project").strip() or "project"
        if text == "project":
            return cls("project")
        kind, sep, name = text.partition(":")
        if sep and kind in _PREFIXED:
            if not name:
                raise ValueError(f"target {text!r} names no {kind}; expected {kind}:NAME")
            if kind == "mutant":
                from harness.mutants.catalogue import BY_NAME  # the catalogue only when a mutant is named

                if name not in BY_NAME:
                    raise ValueError(f"target {text!r}: no such mutant; expected mutant:NAME with NAME one of "
                                     f"{', '.join(BY_NAME)}")
            if kind == "peer":
                from harness.running.peers import NAMES  # the panel (torch) only when a peer is named

                if name not in NAMES:
                    raise ValueError(f"target {text!r}: no such peer; expected peer:NAME with NAME one of "
                                     f"{', '.join(NAMES)}")
            return cls(kind, name)
        paths = [p for p in text.split(",") if p]
        missing = [p for p in paths if not Path(p).exists()]
        if missing:
            raise ValueError(f"target {text!r}: no such file or folder {missing}; expected 'project', 'module:NAME', "
                             "'mutant:NAME', 'peer:NAME', or source files/folders separated by commas")
        return cls("sources", paths=tuple(str(Path(p).resolve()) for p in paths))

    @classmethod
    def from_env(cls) -> "TargetSpec":
        """The run's target: RMSNORM_TARGET, which the command line and the pytest options set."""
        return cls.parse(os.environ.get(ENV))

    def __str__(self) -> str:
        if self.kind == "project":
            return "project"
        if self.kind == "sources":
            return ",".join(self.paths)
        return f"{self.kind}:{self.name}"

    @property
    def is_project(self) -> bool:
        return self.kind == "project"

    @property
    def prebuilt(self) -> bool:
        """Imported as it is (module:, peer:) rather than built here."""
        return self.kind in ("module", "peer")

    @property
    def project_code(self) -> bool:
        """This project's extension or a mutant of it: held to the project's own contract (strict, and the
        optional laws it promises)."""
        return self.kind in ("project", "mutant")

    def interpreted(self, device: str) -> bool:
        """Whether the target's kernels run under Triton's interpreter (TRITON_INTERPRET=1, set in its
        worker processes alone) on device: Triton code on the CPU. Triton code is a module:NAME whose
        source, or that of a module beside it in its package, holds a kernel decorated with triton.jit
        (read, not imported: triton.jit reads TRITON_INTERPRET when a kernel is decorated, so nothing of
        the target may be imported before the worker has set it), or a Liger-Kernel peer; never sources
        (C++/CUDA), this project or its mutants."""
        if not str(device).startswith("cpu"):
            return False
        if self.kind == "peer":
            return self.name.startswith(_TRITON_PEERS)
        return self.kind == "module" and _holds_triton_kernels(self.name)

    def folder(self) -> str:
        """The name of the folder its saved cases go in: its kind and name; for sources, the first source's
        folder or file name and a hash of their paths (stable while the files are edited)."""
        if self.kind == "sources":
            first = Path(self.paths[0])
            digest = hashlib.sha256(str(self).encode()).hexdigest()[:8]
            return re.sub(r"[^A-Za-z0-9._-]", "_", f"sources-{first.stem or first.name}-{digest}")
        return "project" if self.kind == "project" else re.sub(r"[^A-Za-z0-9._-]", "_", f"{self.kind}-{self.name}")

    def note(self) -> str:
        """One line: what the target is."""
        return {"project": "this project's extension", "module": f"prebuilt module {self.name}",
                "mutant": f"mutant {self.name} of this project's extension",
                "peer": f"peer {self.name} of the reference panel"}.get(self.kind, "sources")

    def build_spec(self) -> tuple["object | None", str]:
        """What builds it here (an rmsnorm._build.BuildSpec; None: nothing, it is imported or built by its
        own builder), and a note."""
        # The builder imports torch: only when a build is asked for, so that this module stays light for
        # the worker's start (harness.running.worker imports it before it ignores Ctrl-C).
        from rmsnorm import _build as build

        if self.kind == "project":
            return build.project_spec()
        if self.kind != "sources":
            return None, self.note()
        bspec = build.sources_spec([Path(p) for p in self.paths])
        return bspec, "sources " + ", ".join(Path(s).name for s in bspec.sources)

    def identity(self) -> dict:
        """What identifies the target in a saved case: its spec and, for sources, a content key."""
        bspec, note = self.build_spec()
        out = {"spec": str(self), "note": note}
        if bspec is not None:
            out["key"] = bspec.key()
            out["sources"] = [str(s) for s in bspec.sources]
        return out


def module_file(name: str) -> Path | None:
    """Where module NAME's source is, found as importlib.util.find_spec(name).origin would find it but
    without importing its parent packages (their __init__ may import triton, or the target itself);
    the current folder searched too, as harness.running.loading imports a module target. None where no
    source file is found (a compiled extension, a module that is not there: loading says why)."""
    parts = name.split(".")
    path: list[str] | None = list(dict.fromkeys([*sys.path, os.getcwd()]))
    spec = None
    for i in range(len(parts)):
        spec = PathFinder.find_spec(".".join(parts[: i + 1]), path)
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or [])
    origin = getattr(spec, "origin", None)
    return Path(origin) if origin and origin.endswith(".py") else None


def _holds_triton_kernels(name: str) -> bool:
    """Whether module NAME, or a module beside it in its package (its kernels are often in a file of
    their own), defines Triton kernels: read as text, never imported."""
    origin = module_file(name)
    if origin is None:
        return False
    files = [origin]
    if "." in name or (origin.name == "__init__.py"):  # in a package: the modules beside it too
        files += sorted(p for p in origin.parent.glob("*.py") if p != origin)
    for f in files:
        try:
            if _TRITON_JIT.search(f.read_text(errors="replace")):
                return True
        except OSError:
            continue
    return False
