"""Where things are, in a clone of the repository and in an installed copy (``pip install``).

In a clone every path is under its root: the extension's sources (kernels/, binding/,
sources.txt), the laws (properties/), builds (.build/), the corpus (corpus/). An installed copy
carries the sources inside the ``rmsnorm`` package (rmsnorm/_sources, put there by setup.py) and
the laws inside ``harness`` (harness/properties); it builds in the user's cache folder and keeps
the corpus in the folder it is run from, the kernel author's repository.
"""

from __future__ import annotations

import os
from pathlib import Path

from rmsnorm._buildenv import BUILD_ROOT_ENV, ROOT, source_root, work_root  # noqa: F401  (where builds go)
from importlib.metadata import entry_points
import tempfile
import sys

IN_CLONE = (ROOT / "sources.txt").is_file() and (ROOT / "properties" / "__init__.py").is_file()
HARNESS = Path(__file__).resolve().parent.parent
CORPUS_ENV = "RMSNORM_CORPUS"


def properties_dir() -> Path:
    """The laws' tests (properties/ in a clone, harness/properties when installed)."""
    return ROOT / "properties" if IN_CLONE else HARNESS / "properties"


def corpus_root() -> Path:
    """Saved failing cases: $RMSNORM_CORPUS, else corpus/ of the clone, else ./corpus where it runs."""
    env = os.environ.get(CORPUS_ENV)
    if env:
        return Path(env)
    return ROOT / "corpus" if IN_CLONE else Path.cwd() / "corpus"


def regressions_dir() -> Path:
    """Cases this project keeps on purpose (regressions/, shipped as harness/regressions)."""
    return ROOT / "regressions" if IN_CLONE else HARNESS / "regressions"


PYTEST_INI = """[pytest]
addopts = -p no:cacheprovider
filterwarnings =
    ignore::UserWarning:torch.utils.cpp_extension
    ignore:Module already imported so cannot be rewritten:pytest.PytestAssertRewriteWarning
"""


def pytest_args() -> list[str]:
    """What every pytest run of the laws that the harness starts is given: the laws' folder as the
    root, and an ini of its own (an installed copy has no pyproject.toml; a kernel author's own
    pytest configuration must not change how the gate runs)."""
    ini = work_root() / "pytest-laws.ini"
    if not ini.is_file() or ini.read_text() != PYTEST_INI:
        ini.parent.mkdir(parents=True, exist_ok=True)
        tmp = ini.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(PYTEST_INI)
        os.replace(tmp, ini)
    # The plugin (options, profiles), unless pip's entry point registers it already: the ini of its
    # own keeps the repository's conftest.py, which would register it, out of these runs. Other
    # installed plugins are kept out by name (one printed five warnings into every gate); only
    # Hypothesis' and xdist's are loaded with this one.
    plugin = [] if plugin_installed() else ["-p", "harness.pytest_plugin"]
    plugins = plugin + [a for name in unneeded_plugins() for a in ("-p", f"no:{name}")]
    return [f"--rootdir={properties_dir().parent}", "-c", str(ini), "-p", "no:cacheprovider", *plugins]


NEEDED_PLUGINS = ("hypothesispytest", "xdist", "xdist.looponfail", "rmsnorm_gate")  # pytest11 entry point names


def unneeded_plugins() -> list[str]:
    """The installed pytest plugins (entry points, group pytest11) the laws' runs do not load."""
    return sorted({ep.name for ep in entry_points(group="pytest11")} - set(NEEDED_PLUGINS))


def plugin_installed() -> bool:
    """Whether pip registered the pytest plugin (entry point pytest11), so every pytest run loads it."""
    return any(ep.value == "harness.pytest_plugin" for ep in entry_points(group="pytest11"))


def keep_caches_out_of_tmp() -> None:
    """torch.compile's caches (the laws compile_equals_eager and peer:compiled fill them) and other
    temporary files in the work root, not in /tmp (torch puts its precompiled headers in
    tempfile.gettempdir()/torchinductor_<user> whatever TORCHINDUCTOR_CACHE_DIR says): a run of the
    gate or of the suite leaves nothing in /tmp. Only where the gate runs (its command, its active
    plugin, this repository's own tests), never in a user's process that merely imports the
    RMSNorm; a TMPDIR the user set is kept, and so is /tmp where the work root's path is too long
    for the Unix sockets multiprocessing makes in it (108 bytes)."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(work_root() / "torchinductor"))
    tmp = work_root() / "tmp"
    if "TMPDIR" not in os.environ and len(str(tmp)) <= 48:
        tmp.mkdir(parents=True, exist_ok=True)
        os.environ["TMPDIR"] = str(tmp)
        tempfile.tempdir = None  # gettempdir() asks again


COMMAND_ENV = "RMSNORM_COMMAND"


def command() -> str:
    """How the user runs this tool, for help, errors and replay lines: `rmsnorm-gate` when started
    by the installed console command, else `python3 -m harness` (a clone). Set in the environment
    by the first process, so its workers and subprocesses name it the same way."""
    v = os.environ.get(COMMAND_ENV)
    if v:
        return v
    return "rmsnorm-gate" if Path(sys.argv[0] or "").name == "rmsnorm-gate" else "python3 -m harness"
