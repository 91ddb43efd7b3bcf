"""The failure corpus: every shrunk failing case, saved as a self-contained JSON file and
replayed on every later run.

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

from .build import ROOT
from .cases import Case, materialize

SMALL_TENSOR_ELEMENTS = 4096  # store the tensors themselves up to this size


def corpus_dir() -> Path:
    return Path(os.environ.get("RMSNORM_CORPUS", ROOT / "corpus"))


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
        "replay": f"python -m harness replay {path.name}",
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
            raise ValueError(f"corpus file {path}: missing {key!r}; expected a file written by harness.corpus")
    return Entry(law=doc["law"], case=Case.from_dict(doc["case"]), path=Path(path), error=doc.get("error", ""),
                 target=doc.get("target"), shrunk=doc.get("shrunk", True))


def entries(law: str | None = None, directory: Path | None = None) -> list[Entry]:
    d = Path(directory or corpus_dir())
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.glob("*.json")):
        e = load_entry(p)
        if law is None or e.law == law:
            out.append(e)
    return out


def resolve(name: str) -> Path:
    """A corpus file by path, by file name in the corpus folder, or by its id."""
    p = Path(name)
    if p.is_file():
        return p
    d = corpus_dir()
    for cand in (d / name, d / f"{name}.json"):
        if cand.is_file():
            return cand
    hits = sorted(d.glob(f"*{name}*.json")) if d.is_dir() else []
    if len(hits) == 1:
        return hits[0]
    raise ValueError(f"no corpus case {name!r} (looked for a file, and in {d}); "
                     f"{'several match: ' + ', '.join(h.name for h in hits) if hits else 'none match'}")
