"""python -m harness fuzz: time-boxed, shows progress, ends with a report, exit 1 on failure."""

from tests._run import run


def test_a_short_fuzz_session_reports(tmp_path):
    code, out = run(["-m", "harness", "fuzz", "--minutes", "0.3", "--laws", "forward_matches_reference,deterministic",
                     "--chunk", "10", "--corpus", str(tmp_path)], timeout=600)
    assert code == 0, out
    assert "fuzz report:" in out and "forward_matches_reference" in out, out


def test_fuzz_finds_and_saves_a_failure(tmp_path):
    code, out = run(["-m", "harness", "fuzz", "--minutes", "1", "--laws", "forward_matches_reference",
                     "--target", "module:tests.targets.wrong_tail", "--corpus", str(tmp_path)], timeout=600)
    assert code == 1, out
    # saved in the target's own folder of the corpus
    assert "FAILED forward_matches_reference" in out and list(tmp_path.glob("module-tests.targets.wrong_tail/*.json")), out


def test_fuzz_names_the_laws_that_never_ran(tmp_path):
    code, out = run(["-m", "harness", "fuzz", "--minutes", "0.05", "--chunk", "5", "--corpus", str(tmp_path)],
                    timeout=600)
    assert code == 0, out
    assert "never ran (the session ended before their turn):" in out and " tests of " in out, out
