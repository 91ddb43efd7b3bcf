"""The weight's layout: the suite draws weights that are not contiguous (one element off alignment,
every other element of a buffer), holds every target to the right answer on them, and lets a
target refuse them unless its contract names the weight layouts it takes."""

import json

import pytest
import torch

from harness.judging.cases import GAP_FILL, WEIGHT_LAYOUTS, Case, materialize
from harness.judging.contract import Contract
from tests._draw import drawn
from tests._run import run


def test_a_weight_layout_keeps_the_values_and_fills_its_gaps():
    plain = materialize(Case(shape=(3, 8), dtype="bfloat16", seed=5), "cpu").weight
    for layout in WEIGHT_LAYOUTS:
        case = Case(shape=(3, 8), dtype="bfloat16", seed=5, weight_layout=layout)
        w = materialize(case, "cpu").weight
        assert torch.equal(w, plain), layout
        assert Case.from_dict(json.loads(case.to_json())) == case
        store = torch.empty(0, dtype=w.dtype).set_(w.untyped_storage())
        if layout == "offset":
            assert w.is_contiguous() and w.data_ptr() % 16 != 0 and torch.isnan(store[0])
        if layout == "col_step":
            assert w.stride() == (2,) and torch.isnan(store[1::2]).all() and torch.isnan(torch.tensor(GAP_FILL))
    # A case saved before the field existed is the contiguous case, and is written as it was.
    old = Case(shape=(3, 8), seed=5)
    assert "weight_layout" not in old.to_dict() and Case.from_dict(old.to_dict()).weight_layout == "contiguous"
    with pytest.raises(ValueError, match="cannot make a weight of 1 element"):
        Case(shape=(4, 1), weight_layout="col_step")
    with pytest.raises(ValueError, match="weight_layout: expected one of"):
        Case(shape=(4, 4), weight_layout="transposed")


def test_weights_off_alignment_and_strided_are_drawn_inside_the_contract(monkeypatch):
    counts = {k: 0 for k in WEIGHT_LAYOUTS}
    for case in drawn(monkeypatch, {"dtypes": ["float32", "bfloat16"]}):
        counts[case.weight_layout] += 1
    assert counts["offset"] >= 5 and counts["col_step"] >= 5 and counts["contiguous"] >= 100, counts
    only = drawn(monkeypatch, {"dtypes": ["float32"], "weight_layouts": ["contiguous", "offset"]}, n=120)
    assert {c.weight_layout for c in only} == {"contiguous", "offset"}


def test_the_contract_names_weight_layouts_or_leaves_their_refusal_allowed():
    loose = Contract.from_dict({"dtypes": ["float32"]}, "test")
    strict = Contract.from_dict({"dtypes": ["float32"], "weight_layouts": list(WEIGHT_LAYOUTS)}, "test")
    none = Contract()
    strided = Case(shape=(2, 8), weight_layout="col_step")
    plain = Case(shape=(2, 8))
    for c in (loose, strict, none):
        assert c.allows(strided) and c.allows(plain)
    assert loose.weight_layout_refusable(strided) and not loose.weight_layout_refusable(plain)
    assert not strict.weight_layout_refusable(strided)
    assert "weight_layouts" not in loose.to_dict() and Contract.from_json(loose.to_json()) == loose
    assert Contract.from_json(strict.to_json()) == strict
    assert "weight layouts contiguous,offset,col_step" in strict.describe()
    narrow = Contract.from_dict({"weight_layouts": ["contiguous"]}, "test")
    assert not narrow.allows(strided) and narrow.allows(plain)
    with pytest.raises(ValueError, match="weight_layouts to include 'contiguous'"):
        Contract.from_dict({"weight_layouts": ["offset"]}, "test")
    with pytest.raises(ValueError, match=r"expected weight_layouts from \('contiguous', 'offset', 'col_step'\)"):
        Contract.from_dict({"weight_layouts": ["contiguous", "padded"]}, "test")


@pytest.mark.parametrize("declared, code", [([], 0), (["--weight-layouts", "contiguous,offset,col_step"], 1)])
def test_a_target_that_refuses_such_weights_fails_only_where_it_declared_them(tmp_path, declared, code):
    out_code, out = run(["-m", "harness", "gate", "--device", "cpu", "--target",
                         "module:tests.targets.contiguous_weight_only", "--dtypes", "float32,bfloat16", *declared,
                         "--corpus", str(tmp_path), "--", "-k", "test_forward_matches_reference"], timeout=900)
    assert out_code == code, out[-3000:]
    if code:
        assert "contiguous_weight_only: expected a contiguous weight" in out and "refused an input inside" in out, \
            out[-3000:]
    else:
        assert "rmsnorm gate PASSED" in out and "weight_layout" in out, out[-3000:]
