"""One bug, one story: what the failing cases of a run have in common.

Each failing case is diagnosed on its own numbers (harness/judging/judge.py), so two cases of one bug can
be told differently (one is a narrower precision's size, the other's rows are each off by one
factor), or one can have no diagnosis at all. Where a run has several failing cases, the report
also says what they share (dtype, layout, eps, the row length's divisors, the value pattern), what
varies among them, and which diagnoses held on every case and which on some only: the common
ground is evidence about the bug that no single case gives.
"""

from __future__ import annotations

import math

from harness.judging.cases import Case

_FACETS = (  # (label, the facet of a case) for the facets compared as they are
    ("dtype", lambda c: c.dtype),
    ("weight", lambda c: c.weight_dtype if c.weight_dtype != c.dtype else "same as x"),
    ("layout", lambda c: c.layout),
    ("grad_out layout", lambda c: c.grad_layout),
    ("weight layout", lambda c: c.weight_layout),
    ("values", lambda c: c.pattern),
    ("eps", lambda c: f"{c.eps:g}"),
    ("rows", lambda c: "none" if c.rows == 0 else ("one" if c.rows == 1 else "several")),
)


def diagnoses_of(message: str) -> list[str]:
    """The diagnosis lines of a failure's message ("y: diagnosis: ..."), as printed."""
    return [line.split(": diagnosis: ", 1)[1].strip() for line in message.splitlines() if ": diagnosis: " in line]


def _kind(diagnosis: str) -> str:
    """A diagnosis without its numbers: what kind of story it tells (its words up to the first
    parenthesis or colon), so that two cases with the same story but other counts agree."""
    cut = min((i for i in (diagnosis.find("("), diagnosis.find(":")) if i > 0), default=len(diagnosis))
    return diagnosis[:cut].strip().rstrip(",;")


def shared(failures: list[dict]) -> list[str]:
    """Report lines for the failing cases of a run (TALLY.failures: law, case, message), when
    there are at least two: what they all share, what varies, and how their diagnoses agree."""
    cases = []
    for f in failures:
        if f.get("case"):
            cases.append((f["law"], Case.from_dict(f["case"]), diagnoses_of(f.get("message", ""))))
    if len(cases) < 2:
        return []
    laws = sorted({law for law, _, _ in cases})
    same, varies = [], []
    for label, facet in _FACETS:
        values = sorted({facet(c) for _, c, _ in cases})
        (same if len(values) == 1 else varies).append(f"{label} {values[0]}" if len(values) == 1
                                                     else f"{label} ({', '.join(values)})")
    ns = sorted({c.n for _, c, _ in cases})
    if len(ns) == 1:
        same.append(f"N = {ns[0]}")
    else:
        varies.append(f"N ({', '.join(map(str, ns[:6]))}{', ...' if len(ns) > 6 else ''})")
        g = 0
        for v in ns:
            g = math.gcd(g, v)
        if g > 1:
            same.append(f"N a multiple of {g}")
        elif all(v % 2 for v in ns):
            same.append("N odd")
    lines = [f"what the {len(cases)} failing cases share ({len(laws)} law(s): {', '.join(laws)}): "
             + ("; ".join(same) if same else "no dtype, layout, eps, value pattern or row-length divisor")
             + (f"; they vary in {'; '.join(varies)}" if varies else "")]
    kinds = [{_kind(d) for d in ds} for _, _, ds in cases]
    every = set.intersection(*kinds) if kinds else set()
    if every:
        lines.append("diagnosed the same way on every failing case: " + "; ".join(sorted(every)))
    elif any(kinds):
        told = [f"{law} on {list(c.shape)}: {', '.join(sorted(k)) if k else 'no diagnosis'}"
                for (law, c, _), k in zip(cases, kinds)]
        lines.append("the diagnoses differ from case to case, so none is the bug's whole story (each held on its "
                     "own numbers); what every case shares is above: " + "; ".join(told))
    return lines
