"""Hypothesis profiles of the laws (choose with --hypothesis-profile NAME or HYPOTHESIS_PROFILE):

  dev   quick, for development (default)
  ci    derandomized, fixed budget: the same cases on every run (CI and the pre-merge gate)
  gate  alias of ci
  fuzz  large budget, random seeds, no deadline: long fuzzing sessions

Registered when the pytest plugin is imported (a clone's conftest.py, or the plugin's entry point
in an installed copy), so a kernel repository's own pytest has them too.
"""

import os

from hypothesis import HealthCheck, Phase, settings

_common = dict(
    deadline=None,  # the target runs in a worker process: latency is not the target's speed
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
    # No "explain" phase: its notes (lines only failing cases ran) point into the harness, not
    # the target, and the gate's report says what failed.
    phases=[p for p in Phase if p is not Phase.explain],
)
# Each profile starts from Hypothesis' own defaults, not from whatever profile is loaded at import:
# where a CI variable is set, Hypothesis loads its "ci" profile (derandomized, no database) first,
# and a fuzzing session would then draw the same cases chunk after chunk.
_base = settings.get_profile("default")
settings.register_profile("dev", parent=_base, max_examples=20, **_common)
settings.register_profile("ci", parent=_base, max_examples=40, derandomize=True, database=None, **_common)
settings.register_profile("gate", parent=settings.get_profile("ci"))
settings.register_profile("fuzz", parent=_base, max_examples=1_000_000, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
