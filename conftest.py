"""pytest options and Hypothesis profiles for the RMSNorm suite (no test logic here): both come
from the harness's pytest plugin (harness/pytest_plugin.py; the profiles: harness/profiles.py).
An installed copy registers the plugin through its entry point; a clone loads it here."""

import os
from pathlib import Path

from harness.locations import keep_caches_out_of_tmp, plugin_installed

# The suite's own temporary folders (pytest's tmp_path) under .build/, not in the system's /tmp.
os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", str(Path(__file__).resolve().parent / ".build"))
(Path(os.environ["PYTEST_DEBUG_TEMPROOT"])).mkdir(parents=True, exist_ok=True)
keep_caches_out_of_tmp()

pytest_plugins = [] if plugin_installed() else ["harness.pytest_plugin"]
