"""A new user's first hour, timed: clone this repository fresh, then run the two command lines at
the top of its README (install and run the gate; install and run the tests), as written, from
the clone's root, and write how long each took and how it ended.

    python3 benchmarks/first_hour.py --out benchmarks/results/cpu/first-hour-cpu.txt

The clone (of the committed HEAD) lives in a temporary folder that is removed afterwards, and the
commands run in a virtual environment made there that sees this Python's packages (so what is
installed already, torch say, counts as installed, and nothing is installed into this Python);
the README quotes the times from the output file.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands(readme: str) -> list[str]:
    block = re.findall(r"```bash\n(.*?)```", readme, re.S)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def minutes(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s" if m else f"{s} s"


def speed_probe(steps: int = 20_000_000) -> float:
    """Seconds for a fixed pure-Python loop on one core: these machines differ in speed from one
    day to the next (the same compile took 2.3 times as long on one as on another), so each
    measurement says how fast its machine was."""
    t0 = time.perf_counter()
    total = 0
    for i in range(steps):
        total += i
    return time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    lines = [f"commit {commit}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"Python {sys.version.split()[0]}, a fresh clone; the README's command lines as written, in a "
             "virtual environment over this Python's packages; tests/test_readme.py's check of these "
             "figures skips itself in the run it times",
             f"speed probe: 20,000,000 Python additions on one core in {speed_probe():.2f} s, before the commands"]
    where = Path(tempfile.mkdtemp(prefix="first-hour-"))
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(where / "clone")], check=True)
        clone = where / "clone"
        venv = where / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
        # The one test that checks the README's copy of these figures skips itself in this run.
        env = dict(os.environ, VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
                   RMSNORM_TIMING_FIRST_HOUR="1")
        for name, cmd in zip(("gate", "tests"), readme_commands((clone / "README.md").read_text())):
            t0 = time.monotonic()
            r = subprocess.run(["bash", "-c", cmd], cwd=clone, env=env, capture_output=True, text=True)
            dt = time.monotonic() - t0
            out = (r.stdout + r.stderr).strip().splitlines()
            # The verdict or pytest's summary: standard output's last line (standard error's came
            # last once, a plugin's warning), else standard error's.
            said = [l for l in r.stdout.splitlines() if l.strip()] or \
                [l for l in r.stderr.splitlines() if l.strip() and not l.startswith(("W1", "WARNING"))]
            last = said[-1] if said else ""
            lines.append(f"{name}: {minutes(dt)}, exit {r.returncode}: {cmd}")
            lines.append(f"  last line: {last.strip()[:300]}")
            (where / f"{name}.log").write_text("\n".join(out))
            if r.returncode != 0:
                print("\n".join(out[-40:]), file=sys.stderr)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
