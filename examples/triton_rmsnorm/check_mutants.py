"""Plants each mutant of mutants.py in a temporary copy of rmsnorm_triton.py and shows, against
tests/targets/correct_torch.py, that it is wrong on its kill input and that the original is right
on the same input.

    TRITON_INTERPRET=1 python3 examples/triton_rmsnorm/check_mutants.py [NAME ...]

Exit status 0 when every mutant asked for is killed and the original passes, 1 otherwise.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from examples.triton_rmsnorm import check
from examples.triton_rmsnorm.mutants import MUTANTS

SOURCE = HERE / "rmsnorm_triton.py"


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def planted(mutant: dict, folder: Path):
    """The module with the mutant planted, written to folder (Triton reads a kernel's source from its file)."""
    text = SOURCE.read_text()
    found = text.count(mutant["old"])
    if found != 1:
        raise ValueError(f"mutant {mutant['name']}: expected its old text once in {SOURCE.name}, but found it "
                         f"{found} times: {mutant['old']!r}")
    path = folder / f"rmsnorm_triton_{mutant['name']}.py"
    path.write_text(text.replace(mutant["old"], mutant["new"]))
    return load(path, path.stem)


def verdict(result: dict) -> str:
    wrong = {k: v for k, v in result.items() if k != "error" and v > 1}
    if not wrong:
        return "right (" + ", ".join(f"{k} {v:.2g}" for k, v in result.items()) + ")"
    return "WRONG (" + ", ".join(f"{k} {v:.3g}" for k, v in wrong.items()) + \
        (f"; {result['error']}" if "error" in result else "") + ")"


def main(names: list[str]) -> int:
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("check_mutants: expected TRITON_INTERPRET=1 (run before triton is imported), but it is not set",
              file=sys.stderr)
        return 2
    unknown = set(names) - {m["name"] for m in MUTANTS}
    if unknown:
        print(f"check_mutants: expected mutant names from {[m['name'] for m in MUTANTS]}, but got {sorted(unknown)}",
              file=sys.stderr)
        return 2
    original = load(SOURCE, "rmsnorm_triton_original")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for mutant in MUTANTS:
            if names and mutant["name"] not in names:
                continue
            k = mutant["kill"]
            args = (tuple(k["shape"]), k["dtype"], k["weight_dtype"], k["layout"], k["grad_layout"])
            x, w, g = check.inputs(*args)
            before = check.compare(original, x, w, 1e-6, g)
            after = check.compare(planted(mutant, Path(tmp)), x, w, 1e-6, g)
            killed = any(v > 1 for key, v in after.items() if key != "error")
            clean = all(v <= 1 for key, v in before.items() if key != "error")
            failures += not (killed and clean)
            print(f"{mutant['name']}: input shape={list(args[0])} {args[1]} weight={args[2]} x={args[3]} "
                  f"grad_out={args[4]}\n  original {verdict(before)}\n  mutant   {verdict(after)}"
                  f"\n  {'killed' if killed and clean else 'NOT KILLED'}; gate draws such inputs: {mutant['gate']}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
