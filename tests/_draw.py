"""The cases a law's strategy draws for a target under a contract, without running any: what the tests of
the draw (caps, contracts, weight layouts) inspect."""

import json

from harness.running import session
from harness.running.spec import TargetSpec


def drawn(monkeypatch, contract: dict | None, law: str = "forward_matches_reference", n: int = 200,
          spec: str = "project") -> list:
    """n examples of law's strategy (derandomized) for the target spec, with RMSNORM_CONTRACT set to contract
    (unset for None)."""
    from hypothesis import HealthCheck, given, settings

    from properties import strategies

    if contract is None:
        monkeypatch.delenv("RMSNORM_CONTRACT", raising=False)
    else:
        monkeypatch.setenv("RMSNORM_CONTRACT", json.dumps(contract))
    monkeypatch.setattr(session, "_CURRENT", session.Session(TargetSpec.parse(spec)))
    cases = []

    @settings(max_examples=n, database=None, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(case=strategies.strategy_for(law))
    def draw(case):
        cases.append(case)

    draw()
    return cases
