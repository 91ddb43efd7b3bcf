"""Pointed at the seed card's naive kernel (examples/card_naive), the suite finds real failures,
saves them, and the replay command reproduces them."""

import json

from tests._run import pytest_run, run


def test_the_suite_catches_the_card_kernel(tmp_path):
    code, out = pytest_run("properties/test_forward.py::test_forward_matches_reference",
                           "properties/test_laws.py::test_strided_equals_contiguous",
                           "--rmsnorm-target", "examples/card_naive", "--rmsnorm-corpus", str(tmp_path),
                           "--hypothesis-profile=ci")
    assert code == 1, out
    assert "rejected" in out, out  # float16, bfloat16 and float64 are refused by data_ptr<float>()
    saved = sorted(tmp_path.rglob("*.json"))  # in the target's folder of the corpus
    assert saved, out
    doc = json.loads(saved[0].read_text())
    assert doc["shrunk"] and doc["target"]["spec"].endswith("examples/card_naive")
    code, out = run(["-m", "harness", "replay", str(saved[0])])
    assert code == 1 and "REPRODUCED" in out, out
