"""The README's promises: its Python snippets run as written, and CI runs its test command."""

import re

from harness.build import ROOT
from tests._run import run

README = (ROOT / "README.md").read_text()


def _python_blocks():
    return re.findall(r"```python\n(.*?)```", README, re.S)


def test_ci_runs_the_readme_test_command():
    commands = re.findall(r"```bash\n(.*?)```", README, re.S)[0].splitlines()
    test_cmd = [c for c in commands if c and not c.startswith("#")][1]
    assert test_cmd in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_usage_snippet_runs():
    code, out = run(["-c", _python_blocks()[0]], timeout=900)
    assert code == 0, out


def test_the_card_snippet_runs_against_this_extension():
    code, out = run(["-c", _python_blocks()[1]], timeout=1800)
    assert code == 0 and "card snippet: ok" in out, out
