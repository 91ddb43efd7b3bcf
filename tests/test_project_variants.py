"""This project's own fused forms (rmsnorm.rms_norm: the residual returned, in place, with a float32 stream;
Gemma's (1 + w); no weight) judged by the gate through examples/project_variants/, each declaring its variant
and the rounding order rmsnorm's docstring states. Each gate is limited to the laws its keys bring."""

import pytest

from tests._run import run

FORWARD, BACKWARD, ORDER = ("variant_forward_matches_reference", "variant_backward_matches_reference",
                            "follows_declared_order")
FORMS = [
    ("fused_add", [FORWARD, "variant_two_layers", ORDER]),
    ("fused_add_in_place", [FORWARD, "variant_aliased_residual", ORDER]),
    ("fused_add_fp32_stream", [FORWARD, BACKWARD]),
    ("gemma", [FORWARD, BACKWARD, ORDER]),
    ("gemma_fused_add", [FORWARD, "variant_two_layers"]),
    ("no_weight", [FORWARD, BACKWARD]),
]


@pytest.mark.parametrize("form, laws", FORMS, ids=[f[0] for f in FORMS])
def test_the_projects_fused_form_passes_the_laws_of_its_keys(form, laws, tmp_path):
    code, out = run(["-m", "harness", "gate", "--device", "cpu", "--target", f"module:examples.project_variants.{form}",
                     "--corpus", str(tmp_path), "--", "-k", " or ".join(laws)])
    assert code == 0, out[-4000:]
    assert f"rmsnorm gate PASSED: lane CPU, target module:examples.project_variants.{form}" in out, out[-4000:]
    for law in laws:  # ran, and judged cases: not skipped as not applicable
        row = next((l for l in out.splitlines() if l.startswith(law + " ")), "")
        assert row and int(row.split()[1]) > 0, (law, out[-4000:])


def test_the_worked_example_of_a_fused_gemma_norm_passes(tmp_path):
    """examples/fused_gemma/README.md's command, limited to the laws its keys bring."""
    laws = [FORWARD, "variant_two_layers", ORDER]
    code, out = run(["-m", "harness", "gate", "--device", "cpu", "--target", "module:examples.fused_gemma.gemma_fused_add",
                     "--corpus", str(tmp_path), "--", "-k", " or ".join(laws)])
    assert code == 0, out[-4000:]
    assert ("fused residual add, returned (float32 sum normalised, residual stream in x dtype); weight (1 + w); "
            "order multiply_in_float32") in out, out[-4000:]
