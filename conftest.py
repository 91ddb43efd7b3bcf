"""pytest options and Hypothesis profiles for the RMSNorm suite (no test logic here): both come
from the harness's pytest plugin (harness/pytest_plugin.py; the profiles: harness/running/hypothesis_profiles.py).
An installed copy registers the plugin through its entry point; a clone loads it here. Also the
order in which this clone's test files go to pytest-xdist's workers (longest first)."""

import os
from pathlib import Path

import pytest

from harness.running.locations import keep_caches_out_of_tmp, plugin_installed

# The suite's own temporary folders (pytest's tmp_path) under .build/, not in the system's /tmp.
os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", str(Path(__file__).resolve().parent / ".build"))
(Path(os.environ["PYTEST_DEBUG_TEMPROOT"])).mkdir(parents=True, exist_ok=True)
keep_caches_out_of_tmp()

pytest_plugins = [] if plugin_installed() else ["harness.pytest_plugin"]

# Under pytest-xdist (the README's test line: -n 2 --dist loadfile) a worker takes a whole file at a
# time, in the order collected. pytest-xdist's own order (most tests first) left the install test's
# 205 s to run last, alone, while the other worker had nothing left (68 s of one core idle on the
# 2-core CI machine). The longest files first instead, by their test durations summed in one run of
# the test line there (seconds, a fresh clone; test_cmake and test_fuzz were cut after that run, so
# they come later than it put them); the rest after them in their own order.
LONGEST_FIRST = ("tests/test_mutants.py",  # 298
                 "tests/test_install.py",  # 249
                 "tests/test_peers.py",  # 220
                 "tests/test_report.py",  # 199
                 "tests/test_sheet.py",  # 149
                 "tests/test_verdict.py",  # 135
                 "tests/test_interrupt.py",  # 132
                 "tests/test_compiled_targets.py",  # 112
                 "tests/test_worker.py",  # 107
                 "tests/test_cmake.py",  # 145; 78 since, beside one other test, as a unity build
                 "tests/test_fuzz.py",  # 109, before its two longest sessions were halved
                 "tests/test_card_naive.py",  # 62
                 "tests/test_readme.py",  # 43
                 "tests/test_kernel_resources.py",  # 28
                 "tests/test_heap.py")  # 11
# The tests held alone (marked exclusive) after everything else: by then the other worker has only
# short files left, so they wait seconds for it, not minutes.
LAST = ("tests/test_timing.py",)


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # keep the collected order below


# A file's place: its index in LONGEST_FIRST, then every other file (in collected order), then LAST.
RANK = ({f: i for i, f in enumerate(LONGEST_FIRST)}
        | {f: len(LONGEST_FIRST) + 1 + i for i, f in enumerate(LAST)})


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    root = Path(__file__).resolve().parent

    def rank(item):
        path = Path(str(item.fspath)).resolve()
        rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else ""
        return RANK.get(rel, len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: the properties' order and each file's own order kept
