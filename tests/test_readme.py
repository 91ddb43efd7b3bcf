"""The README's promises: its snippets run as written, CI runs its test command, and the figures it
quotes are in the committed outputs it names (tests/test_install.py runs the snippets from an
installed copy too)."""

import os
import re

import pytest

from rmsnorm._buildenv import ROOT
from tests._run import run

README = (ROOT / "README.md").read_text()
CARD_ROUTE = (ROOT / "docs" / "card-route.md").read_text()  # the card's own route, linked from the README


def _python_block(prints: str, text: str = README) -> str:
    """The python snippet of text (the README's by default) that prints `prints` when it runs."""
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if prints in b]
    assert len(blocks) == 1, f"expected one snippet printing {prints!r}, found {len(blocks)}"
    return blocks[0]


def test_ci_runs_the_readme_test_command():
    commands = re.findall(r"```bash\n(.*?)```", README, re.S)[0].splitlines()
    test_cmd = [c for c in commands if c and not c.startswith("#")][1]
    assert test_cmd in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_usage_snippet_runs():
    code, out = run(["-c", _python_block("rmsnorm: ok")], timeout=900)
    assert code == 0 and "rmsnorm: ok" in out, out


def test_the_variants_snippet_runs():
    code, out = run(["-c", _python_block("variants: ok")], timeout=900)
    assert code == 0 and "variants: ok (2, 8, 512) torch.bfloat16 torch.bfloat16 torch.float32" in out, out


def test_the_card_snippet_runs_against_this_extension():
    # What it runs: where no GPU is, the CPU build (RMSNORM_BUILD=cpu, as tests/test_install.py runs it).
    # The CUDA objects of the same sources.txt are compiled by the test run's build of the project, by
    # tests/test_cmake.py and by tests/test_kernel_resources.py; compiling them a fourth time here for a
    # snippet that cannot run them cost about 50 s of CPU on the 2-core CI machine, more than the test
    # itself, so it is no longer marked slow.
    import torch

    env = None if torch.cuda.is_available() else {"RMSNORM_BUILD": "cpu"}
    code, out = run(["-c", _python_block("card snippet: ok", CARD_ROUTE)], env=env, timeout=1800)
    assert code == 0 and "card snippet: ok" in out, out


def test_the_speed_tables_are_rows_of_the_committed_bench():
    bench = (ROOT / "benchmarks" / "results" / "h200" / "bench-h200.md").read_text()
    speed = README.split("## Speed", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in speed.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) >= 10, speed
    for row in rows:
        assert row in bench, f"README row not in benchmarks/results/h200/bench-h200.md: {row}"


def test_the_first_hour_figures_are_the_measured_ones():
    if os.environ.get("RMSNORM_TIMING_FIRST_HOUR"):
        pytest.skip("this run is the one benchmarks/first_hour.py times: its figures are checked once written")
    measured = (ROOT / "benchmarks" / "results" / "cpu" / "first-hour-cpu.txt").read_text()
    times = dict(re.findall(r"^(gate|tests): ([0-9]+ min [0-9]+ s|[0-9]+ s), exit 0:", measured, re.M))
    assert set(times) == {"gate", "tests"}, measured
    commit = re.match(r"commit ([0-9a-f]+),", measured).group(1)
    # The first screen, before the README's first section, gives them as a table row: the commit, then the
    # first line's time and the second's.
    first_screen = README.split("\n## ", 1)[0]
    assert f"| {commit} | {times['gate']} | {times['tests']} |" in first_screen, (commit, times, first_screen)
