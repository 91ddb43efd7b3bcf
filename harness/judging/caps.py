"""The sizes a run draws under Triton's interpreter, and the laws whose cases lie past them.

Triton's interpreter (TRITON_INTERPRET=1) runs a kernel's programs one after another in Python, numpy
doing each block's arithmetic: a row costs milliseconds where a GPU spends microseconds on a whole
tensor (examples/triton_rmsnorm/NOTES.md has the measurements). Cases of the compiled path's sizes
(65,536 rows of one element: some 65,536 programs) run for minutes, and the gate took them for hangs.
An interpreted run draws inside these caps instead, as it draws inside a contract, and the report
says so; the laws that need larger cases are not run (never passed, never failed), each naming why.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.judging.cases import Case


@dataclass(frozen=True)
class Caps:
    """At most max_rows rows, max_elements elements and rows of at most max_n, a tensor."""

    max_rows: int
    max_elements: int
    max_n: int

    def allows(self, case: Case) -> bool:
        return case.rows <= self.max_rows and case.numel <= self.max_elements and case.n <= self.max_n

    def describe(self) -> str:
        return (f"drawn under the interpreter's caps: at most {self.max_rows} rows, {self.max_elements:,} elements "
                f"and N <= {self.max_n:,} a tensor (its programs run one after another on the CPU; the laws that "
                "need larger cases are named as not run)")


# The arithmetic behind them (examples/triton_rmsnorm/NOTES.md, "Proposed caps"): a row costs the
# interpreter a few milliseconds whatever N up to a block of 4096, so the rows bound a call; the
# elements bound rows past a block; 32 x 4096 and 2 x 65,536 cost about the same. A gate run on the
# example measured what cases drawn under them cost (examples/triton_rmsnorm/README.md).
INTERPRETER = Caps(max_rows=32, max_elements=1 << 17, max_n=1 << 16)

# What each law, or each strategy of one (properties/strategies.strategy_for's names: the large and the
# tall cases of forward_matches_reference are drawn by strategies of their own), needs past the caps.
PAST_CAPS = {
    "forward_matches_reference_tall": f"65,535 rows and more a case; the cap is {INTERPRETER.max_rows} rows",
    "backward_matches_reference_tall": f"65,535 rows and more a case; the cap is {INTERPRETER.max_rows} rows",
    "forward_matches_reference_large": "up to 2^24 elements a case; the cap is 2^17",
    "backward_matches_reference_large": "up to 2^24 elements a case; the cap is 2^17",
    "batch_invariant": f"batches of up to 2^17 rows; the cap is {INTERPRETER.max_rows} rows",
    "beyond_2_31_elements": "tensors past 2^31 elements; the cap is 2^17 (row_offsets_past_2_31 judges 64-bit row "
                            "offsets on the CPU)",
}


def past_caps(drawn: str) -> str | None:
    """Why the cases of a law (or of one of its strategies) lie past the interpreter's caps, or None."""
    why = PAST_CAPS.get(drawn)
    return f"not run under the interpreter ({why})" if why else None
