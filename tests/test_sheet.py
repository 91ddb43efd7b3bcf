"""The property sheet and the optional laws (deterministic, batch_invariant): a target that sums
in another order from 64 rows on is named batch variant, at the batch size where it starts; this
project is batch invariant; the gate holds a target to batch invariance only when asked
(--require), and this project by default."""

import json

import pytest

from tests._run import run

VARIANT = "module:tests.targets.batch_variant"


def gate(*args):
    return run(["-m", "harness", "gate", "--device", "cpu", *args], timeout=900)


@pytest.fixture(scope="module")
def sheet(tmp_path_factory):
    out = tmp_path_factory.mktemp("sheet")
    code, text = run(["-m", "harness", "sheet", "--device", "cpu", "--no-gate", "--target", f"project,{VARIANT}",
                      "--out", str(out)], timeout=900)
    assert code == 0, text[-3000:]
    return json.loads((out / "sheet.json").read_text()), text, out


def test_the_sheet_tells_the_batch_variant_target_from_the_invariant_ones(sheet):
    data, text, out = sheet
    cols = {c["target"]: c for c in data["targets"]}
    assert list(cols) == ["project", VARIANT, "peer:hf"]  # eager PyTorch is always in the run
    assert cols["project"]["batch invariant"]["ok"] is True, cols["project"]["batch invariant"]
    bad = cols[VARIANT]["batch invariant"]
    assert bad["ok"] is False and bad["text"].startswith("no: from 64 rows"), bad
    for c in cols.values():
        assert c["deterministic"]["ok"] is True, (c["target"], c["deterministic"])
        assert c["inputs untouched"]["ok"] is True and c["grad_out untouched"]["ok"] is True, c["target"]
    assert cols["project"]["dtypes"]["text"] == "float32, float16, bfloat16, float64"
    assert cols["peer:hf"]["dtypes"]["text"].endswith("refused: float64")
    acc = cols["project"]["accuracy"]
    assert set(acc) == {"float32", "float16", "bfloat16", "float64"}
    assert 0 < acc["bfloat16"]["y"]["worst"] < 4, acc["bfloat16"]  # within a few roundings of float64
    assert "| batch invariant | yes" in text and "| accuracy bfloat16 y, median / worst |" in text
    assert (out / "sheet.png").read_bytes()[:4] == b"\x89PNG"


def test_batch_invariance_is_held_only_when_required():
    code, out = gate("--target", VARIANT, "--require", "batch-invariant", "--", "-k", "test_batch_invariant")
    assert code == 1, out[-3000:]
    assert "not batch invariant" in out and "between a batch of 63 and a batch of 64 rows" in out, out[-3000:]
    code, out = gate("--target", VARIANT, "--", "-k", "test_batch_invariant")
    assert code == 0, out[-3000:]
    assert "not required of this target (--require batch-invariant holds it to it)" in out, out[-3000:]


def test_this_project_is_held_to_both_by_default():
    code, out = gate("--", "-k", "test_batch_invariant or test_deterministic")
    assert code == 0, out[-3000:]
    assert "batch_invariant" in out and "deterministic" in out and "not required" not in out, out[-3000:]


def test_an_unknown_requirement_is_a_set_up_error():
    code, out = gate("--require", "fast")
    want = "--require: expected names from deterministic, batch-invariant (or none), but got fast"
    assert code == 2 and want in out, out
