"""The failure corpus: every shrunk failing case, saved as a self-contained JSON file and
replayed on every later run.

Cases are kept in a folder per target under the corpus root (corpus/project, corpus/peer-hf,
corpus/sources-mykernel-1a2b3c4d, ...), so a user's extension never leaves its failures in this
project's own replay. A run replays its target's own cases, then, as seeds, the cases of the
other targets in the root and of regressions/ (cases this project keeps on purpose, committed),
each labelled with where it came from when it fails.

A file is named by the hash of (law, case), written atomically (temporary file, then rename),
so several workers may save at once and the same failure is stored once.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.judging.cases import Case, materialize
from harness.running.spec import TargetSpec
from harness.running.locations import command, corpus_root as _corpus_root, regressions_dir

SMALL_TENSOR_ELEMENTS = 4096  # store the tensors themselves up to this size


REGRESSIONS = regressions_dir()


def corpus_root() -> Path:
    return _corpus_root()


def corpus_dir(spec: TargetSpec | None = None) -> Path:
    """The folder of the target's own cases (RMSNORM_TARGET's by default)."""
    return corpus_root() / (spec or TargetSpec.from_env()).folder()


def case_id(law: str, case: Case) -> str:
    return hashlib.sha256(f"{law}\n{case.to_json()}".encode()).hexdigest()[:16]


@dataclass
class Entry:
    law: str
    case: Case
    path: Path
    error: str = ""
    target: dict | None = None
    shrunk: bool = True


def _tensors_blob(case: Case) -> str | None:
    if case.numel > SMALL_TENSOR_ELEMENTS:
        return None
    t = materialize(case, "cpu")
    buf = io.BytesIO()
    torch.save({"x": t.x.contiguous(), "weight": t.weight, "grad_out": t.grad_out.contiguous()}, buf)
    return base64.b64encode(buf.getvalue()).decode()


def save(law: str, case: Case, *, error: str, target: dict, device: str, shrunk: bool = True,
         directory: Path | None = None) -> Path:
    """Write the case atomically; return its path."""
    d = Path(directory or corpus_dir())
    d.mkdir(parents=True, exist_ok=True)
    cid = case_id(law, case)
    path = d / f"{law}-{cid}.json"
    doc = {
        "format": 1,
        "law": law,
        "case": case.to_dict(),
        "shrunk": shrunk,
        "error": error,
        "target": target,
        "device": device,
        "gpu": torch.cuda.get_device_name() if device.startswith("cuda") and torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tensors_torch_save_b64": _tensors_blob(case),
        "replay": f"{command()} replay {path}",
    }
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_entry(path: Path) -> Entry:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"corpus file {path}: cannot read it as JSON ({e})") from None
    for key in ("law", "case"):
        if key not in doc:
            raise ValueError(f"corpus file {path}: missing {key!r}; expected a file written by harness.running.corpus")
    return Entry(law=doc["law"], case=Case.from_dict(doc["case"]), path=Path(path), error=doc.get("error", ""),
                 target=doc.get("target"), shrunk=doc.get("shrunk", True))


def entries(law: str | None = None, directory: Path | None = None) -> list[Entry]:
    """The target's own cases, or every case under directory (its subfolders too)."""
    d = Path(directory) if directory is not None else corpus_dir()
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.rglob("*.json") if directory is not None else d.glob("*.json")):
        e = load_entry(p)
        if law is None or e.law == law:
            out.append(e)
    return out


def seeds(law: str) -> list[tuple[Entry, str]]:
    """Cases of law saved for other targets, and kept in regressions/, with where each came from."""
    own = corpus_dir().resolve()
    out = []
    root = corpus_root()
    folders = sorted(p for p in root.iterdir() if p.is_dir() and p.resolve() != own) if root.is_dir() else []
    for folder in folders:
        out += [(e, f"a seed from the corpus of another target ({folder.name})") for e in entries(law, folder)]
    if REGRESSIONS.is_dir():
        out += [(e, "a regression case this project keeps (regressions/)") for e in entries(law, REGRESSIONS)]
    return out


def resolve(name: str) -> Path:
    """A corpus file by path, by file name or id in the target's folder or anywhere in the root."""
    p = Path(name)
    if p.is_file():
        return p
    d = corpus_dir()
    for cand in (d / name, d / f"{name}.json"):
        if cand.is_file():
            return cand
    d = corpus_root()
    hits = sorted(d.rglob(f"*{name}*.json")) if d.is_dir() else []
    if len(hits) == 1:
        return hits[0]
    raise ValueError(f"no corpus case {name!r} (looked for a file, and in {d}); "
                     f"{'several match: ' + ', '.join(h.name for h in hits) if hits else 'none match'}")
