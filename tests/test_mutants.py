"""The mutant catalogue stays in step with the sources, and the CPU lane kills every mutant of
the CPU kernels and the binding (python -m harness mutate --device cpu)."""

import json

import pytest

from harness import mutants
from tests._run import ROOT, run


def test_catalogue_matches_the_sources():
    assert mutants.check_catalogue() == []
    assert len(mutants.CATALOGUE) >= 25
    assert {m.lane for m in mutants.CATALOGUE} == set(mutants.LANES)
    for m in mutants.CATALOGUE:
        assert m.bug and m.edits, m.name
        assert not m.echoes or ("/" in m.echoes and "#" in m.echoes), m.name


def test_apply_refuses_a_catalogue_that_drifted():
    m = mutants.BY_NAME["cpu_eps_outside_sqrt"]
    files = {e.file: (ROOT / e.file).read_text() for e in m.edits}
    mutated = mutants.apply(m, files)
    assert all(mutated[f] != files[f] for f in mutated)
    with pytest.raises(ValueError, match="no longer matches"):
        mutants.apply(m, {f: text.replace(m.edits[0].old, "") for f, text in files.items()})


def test_unknown_mutant_is_a_clear_error():
    code, out = run(["-m", "harness", "mutate", "--device", "cpu", "--only", "no_such_mutant"])
    assert code == 2 and "unknown mutant" in out and "cpu_tail_skipped" in out, out


def test_the_cpu_lane_kills_every_mutant_of_the_cpu_code(tmp_path):
    report = tmp_path / "score.md"
    code, out = run(["-m", "harness", "mutate", "--device", "cpu", "--profile", "ci", "--report", str(report)],
                    timeout=3600)
    assert code == 0, out[-6000:]
    expected = {m.name for m in mutants.select(None, mutants.lanes_for("cpu"))}
    table = report.read_text()
    assert all(f"| {name} |" in table for name in expected), table
    verdicts = [json.loads(l) for l in (ROOT / ".build" / "mutants" / "runs-cpu" / "results.jsonl").read_text().splitlines()]
    assert {v["mutant"] for v in verdicts if v["status"] == "killed"} == expected, out[-6000:]
    assert all(v["case"] and v["law"] for v in verdicts), verdicts
