"""The mutant catalogue stays in step with the sources, and the CPU lane kills every mutant of
the CPU kernels and the binding (python -m harness mutate --device cpu)."""

import json

import pytest

from harness.mutants import builder, catalogue as mutants
from tests._run import ROOT, run


def test_catalogue_matches_the_sources():
    assert mutants.check_catalogue() == []
    assert len(mutants.CATALOGUE) >= 25
    assert {m.lane for m in mutants.CATALOGUE} == set(mutants.LANES)
    for m in mutants.CATALOGUE:
        assert m.bug and m.edits, m.name
        assert not m.echoes or ("/" in m.echoes and "#" in m.echoes), m.name


def test_a_mutant_judged_by_nothing_must_say_why(monkeypatch):
    m = mutants.BY_NAME["cluster_entry_wait_missing"]
    assert m.unjudged and not m.by_suite and not m.sanitizer
    silent = mutants.Mutant(m.name, m.lane, m.bug, m.edits, by_suite=False)
    monkeypatch.setattr(mutants, "CATALOGUE", tuple(silent if c is m else c for c in mutants.CATALOGUE))
    assert mutants.check_catalogue() == [f"{m.name}: judged by nothing (by_suite is False and it names no "
                                         "sanitizer) and says nowhere why (unjudged)"]


def test_mutate_says_why_a_mutant_it_cannot_judge_is_not_run():
    code, out = run(["-m", "harness", "mutate", "--device", "cuda", "--only", "cluster_entry_wait_missing"])
    assert code == 2 and "cluster_entry_wait_missing is judged by no tool (racecheck" in out, out
    assert "compute-sanitizer" not in out, out
    code, out = run(["-m", "harness", "mutate", "--device", "cuda", "--only", "fast_slots_single_buffered"])
    assert code == 2 and "fast_slots_single_buffered are judged by compute-sanitizer" in out, out


def test_apply_refuses_a_catalogue_that_drifted():
    m = mutants.BY_NAME["cpu_eps_outside_sqrt"]
    files = {e.file: (ROOT / e.file).read_text() for e in m.edits}
    mutated = builder.apply(m, files)
    assert all(mutated[f] != files[f] for f in mutated)
    with pytest.raises(ValueError, match="no longer matches"):
        builder.apply(m, {f: text.replace(m.edits[0].old, "") for f, text in files.items()})


def test_unknown_mutant_is_a_clear_error():
    code, out = run(["-m", "harness", "mutate", "--device", "cpu", "--only", "no_such_mutant"])
    assert code == 2 and "unknown mutant" in out and "cpu_tail_skipped" in out, out


@pytest.mark.slow("19 mutants built (the 8 of binding/rmsnorm.cpp recompile that file alone, about 10 s "
                  "each since it no longer includes torch/library.h; the 11 of the kernels about 3 s), the "
                  "original judged whole (276 s beside the install tests)")
def test_the_cpu_lane_kills_every_mutant_of_the_cpu_code(tmp_path):
    # Each mutant's kept case first (harness/mutants/kills/cpu/), the whole suite only where it no
    # longer kills; two builds at once on the 2-core CI machine.
    report = tmp_path / "score.md"
    # --no-baseline: the card's single check is the README's figure, not what this test asserts.
    code, out = run(["-m", "harness", "mutate", "--device", "cpu", "--profile", "ci", "-b", "2", "--no-baseline",
                     "--report", str(report)], timeout=3600)
    assert code == 0, out[-6000:]
    expected = {m.name for m in mutants.select(None, mutants.lanes_for("cpu"))}
    table = report.read_text()
    assert all(f"| {name} |" in table for name in expected), table
    verdicts = [json.loads(l) for l in (ROOT / ".build" / "mutants" / "runs-cpu" / "results.jsonl").read_text().splitlines()]
    assert {v["mutant"] for v in verdicts if v["status"] == "killed"} == expected, out[-6000:]
    assert all(v["case"] and v["law"] for v in verdicts), verdicts
    assert all(v["confirmed"] == "yes" for v in verdicts), [v for v in verdicts if v["confirmed"] != "yes"]
    assert "the unmutated sources pass" in out and "time to kill: median" in out, out[-3000:]
    from harness.tools.mutate import KILLS

    kept = {p.stem for p in (KILLS / "cpu").glob("*.json")}
    assert kept >= expected, expected - kept  # every CPU mutant has a kept case
    assert f"kills: {len(expected)} from kept cases, 0 from a fresh search" in out, out[-3000:]


def _fake_run(monkeypatch, tmp_path, verdicts: dict, confirmations: dict):
    """mutate.main with building, judging and replaying replaced by the given outcomes (and the toolchain
    probe by a sound verdict: nothing is built, and a probe in a fresh build folder costs about 12 CPU-s)."""
    from harness.tools import mutate
    from rmsnorm import _toolchain as toolchain

    monkeypatch.setenv("RMSNORM_BUILD_ROOT", str(tmp_path))
    sound = toolchain.Verdict(sound=True, variant=toolchain.VARIANTS[0][0], cflags=(), ldflags=(), compiler="c++",
                              default_failure="", tried=(f"{toolchain.VARIANTS[0][0]}: raised",))
    monkeypatch.setattr(toolchain, "probe", lambda **kw: sound)
    monkeypatch.setattr(mutate.builder, "build_mutant", lambda m, **kw: (tmp_path / "lib.so", 0.0))
    monkeypatch.setattr(mutate, "baseline", lambda m, **kw: ("not run", ""))
    monkeypatch.setattr(mutate, "replay_kept", lambda m, **kw: None)

    def judge(m, **kw):
        status, law = verdicts[m.name]
        return mutate.Result(m.name, m.lane, m.bug, m.echoes, status, law=law, message="wrong y",
                             case="shape=[7] float32", corpus_file=str(tmp_path / f"{m.name}.json"), seconds=3.0)

    monkeypatch.setattr(mutate, "judge", judge)
    monkeypatch.setattr(mutate.Original, "confirm", lambda self, r: confirmations[r.mutant])
    return mutate


def test_mutate_gives_no_score_when_the_original_fails(monkeypatch, tmp_path, capsys):
    mutate = _fake_run(monkeypatch, tmp_path, {"original": ("killed", "batch_invariant"),
                                               "cpu_tail_skipped": ("killed", "forward_matches_reference")},
                        {"cpu_tail_skipped": "yes"})  # judged beside the original, but no score without it
    code = mutate.main(names=["cpu_tail_skipped"], device="cpu", profile="ci", jobs=1, with_baseline=False,
                       report=tmp_path / "score.md")
    err = capsys.readouterr().err
    assert code == 2
    assert "the unmutated sources fail the suite: batch_invariant on `shape=[7] float32`" in err, err
    assert not (tmp_path / "score.md").exists()


def test_a_kill_the_original_shares_is_not_counted(monkeypatch, tmp_path, capsys):
    mutate = _fake_run(monkeypatch, tmp_path, {"original": ("survived", ""),
                                               "cpu_tail_skipped": ("killed", "forward_matches_reference"),
                                               "cpu_eps_outside_sqrt": ("killed", "batch_invariant")},
                       {"cpu_tail_skipped": "yes", "cpu_eps_outside_sqrt": "fails it too (fail: not batch invariant)"})
    code = mutate.main(names=["cpu_tail_skipped", "cpu_eps_outside_sqrt"], device="cpu", profile="ci", jobs=1,
                       with_baseline=False, report=tmp_path / "score.md")
    out = capsys.readouterr().out
    assert code == 1
    assert "suite 1/2 (each kill confirmed" in out and "not killed: cpu_eps_outside_sqrt" in out, out
    assert "NOT COUNTED: batch_invariant failed, but the original fails it too" in out, out
    table = (tmp_path / "score.md").read_text()
    assert "| cpu_eps_outside_sqrt | cpu |" in table and "**not counted**" in table, table


def test_a_kept_case_that_no_longer_kills_sends_the_mutant_to_the_suite(monkeypatch, tmp_path, capsys):
    mutate = _fake_run(monkeypatch, tmp_path, {"original": ("survived", ""),
                                               "cpu_tail_skipped": ("killed", "forward_matches_reference")},
                       {"cpu_tail_skipped": "yes"})
    (tmp_path / "cpu_tail_skipped.json").write_text('{"law": "forward_matches_reference", "replay": "elsewhere"}')
    seen = []
    monkeypatch.setattr(mutate, "replay_kept", lambda m, **kw: seen.append(m.name))  # None: it no longer kills
    code = mutate.main(names=["cpu_tail_skipped"], device="cpu", profile="ci", jobs=1, with_baseline=False,
                       report=tmp_path / "score.md", keep_new=True, kills_dir=tmp_path / "kills")
    out = capsys.readouterr().out
    assert code == 0 and seen == ["cpu_tail_skipped"], out
    assert "KILLED by forward_matches_reference (a fresh search)" in out, out
    assert "kills: 0 from kept cases, 1 from a fresh search" in out, out
    kept = tmp_path / "kills" / "cpu" / "cpu_tail_skipped.json"  # its new case kept, its replay line naming it
    assert json.loads(kept.read_text()) == {"law": "forward_matches_reference",
                                            "replay": f"python3 -m harness replay {kept}"}


def test_a_mutant_rebuilds_only_the_objects_compiled_from_what_it_edits():
    """The incremental mutant build reads cpp_extension's ninja file: each object's command, with
    its input and output put in, variables expanded; the link's inputs in order."""
    from harness.mutants.builder import NinjaFile

    text = ("ninja_required_version = 1.3\ncxx = c++\nnvcc = /usr/local/cuda/bin/nvcc\n\n"
            "cflags = -DTORCH_EXTENSION_NAME=rmsnorm_mutant -O3\npost_cflags = \ncuda_cflags = -O3 -lineinfo\n"
            "cuda_post_cflags = \nldflags = -shared -lc10\n\n"
            "rule compile\n  command = $cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags\n  depfile = $out.d\n"
            "  deps = gcc\n\nrule cuda_compile\n  depfile = $out.d\n  deps = gcc\n"
            "  command = $nvcc -MD -MF $out.d $cuda_cflags -c $in -o $out $cuda_post_cflags\n\n\n"
            "rule link\n  command = $cxx $in $ldflags -o $out\n\n"
            "build rmsnorm.o: compile /t/binding/rmsnorm.cpp\n"
            "build rmsnorm_rows.cuda.o: cuda_compile /t/kernels/rmsnorm_rows.cu\n\n"
            "build rmsnorm_mutant.so: link rmsnorm.o rmsnorm_rows.cuda.o\n\ndefault rmsnorm_mutant.so\n")
    n = NinjaFile(text)
    assert n.builds["rmsnorm_rows.cuda.o"] == ("cuda_compile", ["/t/kernels/rmsnorm_rows.cu"])
    assert n.command("rmsnorm_rows.cuda.o", inputs=["/s/kernels/rmsnorm_rows.cu"], out="/b/r.o").split() == [
        "/usr/local/cuda/bin/nvcc", "-MD", "-MF", "/b/r.o.d", "-O3", "-lineinfo", "-c", "/s/kernels/rmsnorm_rows.cu",
        "-o", "/b/r.o"]
    assert n.builds["rmsnorm_mutant.so"] == ("link", ["rmsnorm.o", "rmsnorm_rows.cuda.o"])
    assert n.command("rmsnorm_mutant.so", inputs=["/p/rmsnorm.o", "/b/r.o"], out="/b/m.so").split() == [
        "c++", "/p/rmsnorm.o", "/b/r.o", "-shared", "-lc10", "-o", "/b/m.so"]
