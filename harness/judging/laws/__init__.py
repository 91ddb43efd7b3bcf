"""The laws, as run inside the worker process against a loaded target, grouped by family the way
properties/test_*.py groups their tests:

  numerics    forward and backward against float64, gradcheck, autograd's grad_out, inf and NaN
  invariance  scale, rows, layout, determinism
  memory      inputs untouched, every output written, outputs kept between calls, calls after
              calls at neighbouring signatures
  errors      bad inputs raise cleanly
  offsets     rows past 2^31 elements from x's first, on the CPU (64-bit row offsets)
  cuda        past 2^31 elements, the current stream, CUDA graphs
  operators   this project's operators: opcheck, torch.compile
  variants    the RMSNorms people ship beside the card's (a fused add, (1 + w), no weight), and the law of
              a declared rounding order

Each law takes (target, case), raises LawFailure with a readable diagnosis when the target
breaks it, and returns a dict of facts for the run's summary. Target exceptions arrive as
Rejected or Crashed (see harness.judging.target). Judging (bounds, comparison, diagnosis) is
harness.judging.judge; what the laws share is harness.judging.laws.common.
"""

from __future__ import annotations

from harness.judging import judge
from harness.judging.cases import Case
from harness.judging.target import NotApplicable, Target
from harness.judging.laws.registry import LAWS, Law, law  # noqa: F401
from harness.judging.laws import (cuda, errors, invariance, memory, numerics, offsets, operators,  # noqa: F401,E402
                                  variants)  # each registers its laws


def run_law(target: Target, name: str, case: Case, **kw) -> dict:
    law_ = LAWS[name]
    why = law_.applicable(target)
    if why:
        raise NotApplicable(why)
    judge.finite_poison_filled(False)  # no fill of this law's yet (common.poison)
    return law_.fn(target, case, **kw) or {}

