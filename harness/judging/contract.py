"""What a target declares it supports: dtypes, weight dtypes, layouts, the largest N, the largest
row in bytes (one-block kernels that hold a row in shared memory or registers: N < 16384 in float32
is N < 32768 in bfloat16), N a multiple of some number (kernels that need aligned rows), zero rows.

A target declares it on the command line (``--dtypes float32 --layouts contiguous``), in the
environment (RMSNORM_CONTRACT, JSON), or as an attribute of its module (``RMSNORM_CONTRACT = {...}``
in Python, ``m.attr("RMSNORM_CONTRACT") = py::dict(...)`` in a pybind11 module); the command line
and the environment win. The gate then draws only inside the contract and holds the target to
it: a refusal of an input inside a declared contract is a failure. Without a declaration the gate
infers one from the refusals it sees (harness.judging.refusals): a refusal is allowed only where a class of
inputs explains it, and the rest of the run draws inside the contract so inferred.

A class of inputs (``exclude``, ``--exclude``) is one condition on a case or two joined by ``&``:
``dtype=D``, ``weight_dtype=D``, ``layout=L`` (x's), ``weight_layout=L``, ``n>M`` (N above M), ``n%K``
(N not a multiple of K) and ``zero_rows``; ``dtype=bfloat16&n%2`` says "an even N in bfloat16".

The weight's layout (a slice of a larger buffer: one element off alignment, or every other element)
is declared apart, as ``weight_layouts``. Where a contract does not name them, every weight layout
is still drawn and a wrong answer on one still fails, but refusing a weight that is not contiguous
is allowed, whatever else is declared: many extensions ask for a contiguous weight, and a contract
written before the key existed must not start failing on it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from harness.judging.cases import DTYPES, LAYOUTS, WEIGHT_LAYOUTS, Case
from harness.judging.variant import KEYS as VARIANT_KEYS, Variant

WEIGHT_CHOICES = ("same", "float32")  # the weight in x's dtype, or float32
KEYS = ("dtypes", "weight_dtypes", "layouts", "weight_layouts", "max_n", "max_row_bytes", "n_multiple_of",
        "zero_rows", "exclude") + VARIANT_KEYS
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}  # bytes of an element of x


CONDITIONS = ("dtype=D", "weight_dtype=D", "layout=L", "weight_layout=L", "n>M", "n%K", "zero_rows")


def parse_condition(cond: str) -> tuple[str, str | int | None]:
    """(facet, value) of one condition of a class; ValueError naming what was expected."""
    if cond == "zero_rows":
        return "zero_rows", None
    for facet, allowed in (("dtype", tuple(DTYPES)), ("weight_dtype", tuple(DTYPES)), ("layout", LAYOUTS),
                           ("weight_layout", WEIGHT_LAYOUTS)):
        if cond.startswith(facet + "="):
            value = cond[len(facet) + 1:]
            if value not in allowed:
                raise ValueError(f"class condition {cond!r}: expected {facet}= one of {', '.join(allowed)}")
            return facet, value
    for facet, sep in (("n_above", "n>"), ("n_not_multiple", "n%")):
        if cond.startswith(sep):
            digits = cond[2:]
            if not digits.isdigit() or int(digits) < (1 if sep == "n>" else 2):
                raise ValueError(f"class condition {cond!r}: expected {sep} and a whole number"
                                 f"{' >= 1' if sep == 'n>' else ' >= 2'}")
            return facet, int(digits)
    raise ValueError(f"class condition {cond!r}: expected one of {', '.join(CONDITIONS)}")


def meets(cond: str, case: Case) -> bool:
    """Whether case meets one condition of a class."""
    facet, value = parse_condition(cond)
    if facet == "zero_rows":
        return case.rows == 0
    if facet == "n_above":
        return case.n > value
    if facet == "n_not_multiple":
        return case.n % value != 0
    return getattr(case, facet) == value


def in_class(cls: str, case: Case) -> bool:
    """Whether case belongs to a class (every one of its conditions met)."""
    return all(meets(c, case) for c in cls.split("&"))


def parse_class(cls: str) -> str:
    """A class, validated and in its one spelling (conditions sorted); ValueError naming what was wrong."""
    if not isinstance(cls, str) or not cls.strip():
        raise ValueError(f"class {cls!r}: expected conditions joined by '&', each one of {', '.join(CONDITIONS)}")
    conds = sorted({c.strip() for c in cls.split("&") if c.strip()})
    if not 1 <= len(conds) <= 2:
        raise ValueError(f"class {cls!r}: expected one condition or two joined by '&', but got {len(conds)}")
    facets = [parse_condition(c)[0] for c in conds]
    if len(set(facets)) != len(facets):
        raise ValueError(f"class {cls!r}: two conditions on the same thing ({facets[0]})")
    return "&".join(conds)


@dataclass(frozen=True)
class Contract:
    dtypes: tuple[str, ...] = tuple(DTYPES)
    weight_dtypes: tuple[str, ...] = WEIGHT_CHOICES
    layouts: tuple[str, ...] = LAYOUTS
    max_n: int | None = None
    max_row_bytes: int | None = None  # N * x's element size at most this
    n_multiple_of: int = 1  # N a multiple of this (kernels that need aligned rows)
    zero_rows: bool = True
    source: str = ""  # where it was declared; "" when nothing was
    # The weight layouts declared (every one drawn and held to), or None: not declared, every one drawn,
    # and a refusal of a weight that is not contiguous allowed (weight_layout_refusable).
    weight_layouts: tuple[str, ...] | None = None
    # Classes of inputs left out (parse_class), beyond what the keys above say: pairs such as an even N
    # in 16 bits, and every class a contract inferred from refusals holds.
    exclude: tuple[str, ...] = ()
    # Inferred from the target's refusals (harness.judging.refusals), not declared: refusals are still judged by
    # class, and a refusal inside it is not a failure by itself.
    inferred: bool = False
    # The RMSNorm it is (harness.judging.variant): a fused residual add, (1 + w), no weight, the rounding order.
    variant: Variant = Variant()

    @property
    def declared(self) -> bool:
        return bool(self.source) and not self.inferred

    def excluded(self, case: Case) -> bool:
        """Whether case lies in one of the classes the contract leaves out."""
        return any(in_class(c, case) for c in self.exclude)

    def excluded_values(self, facet: str) -> set:
        """The values of one facet (dtype, layout, weight_layout) that a class of one condition leaves out."""
        out = set()
        for cls in self.exclude:
            if "&" not in cls:
                f, v = parse_condition(cls)
                if f == facet:
                    out.add(v)
        return out

    def n_multiple_for(self, dtype: str) -> int:
        """What N must be a multiple of in dtype: n_multiple_of, and every class n%K (alone, or with this dtype)."""
        m = self.n_multiple_of
        for cls in self.exclude:
            conds = cls.split("&")
            ks = [parse_condition(c)[1] for c in conds if c.startswith("n%")]
            rest = [c for c in conds if not c.startswith("n%")]
            if ks and all(c == f"dtype={dtype}" for c in rest):
                m = math.lcm(m, ks[0])
        return m

    @property
    def drawn_weight_layouts(self) -> tuple[str, ...]:
        return WEIGHT_LAYOUTS if self.weight_layouts is None else self.weight_layouts

    def weight_layout_refusable(self, case: Case) -> bool:
        """Whether refusing case is allowed for its weight alone: a weight that is not contiguous,
        where the contract does not name weight layouts."""
        return self.weight_layouts is None and case.weight_layout != "contiguous"

    @classmethod
    def from_dict(cls, d: dict, source: str, inferred: bool = False) -> "Contract":
        """Validate a declaration; ValueError saying what was expected and what was given."""
        if not isinstance(d, dict):
            raise ValueError(f"contract ({source}): expected a dict with keys from {KEYS}, but got {d!r}")
        unknown = set(d) - set(KEYS)
        if unknown:
            raise ValueError(f"contract ({source}): unknown keys {sorted(unknown)}; expected some of {KEYS}")

        def choice(key, allowed):
            vals = tuple(d.get(key, allowed))
            bad = [v for v in vals if v not in allowed]
            if bad or not vals:
                raise ValueError(f"contract ({source}): expected {key} from {tuple(allowed)}, but got {list(vals)}")
            return vals

        max_n = d.get("max_n")
        if max_n is not None and (not isinstance(max_n, int) or isinstance(max_n, bool) or max_n < 1):
            raise ValueError(f"contract ({source}): expected max_n to be an int >= 1, but got {max_n!r}")
        row_bytes = d.get("max_row_bytes")
        if row_bytes is not None and (not isinstance(row_bytes, int) or isinstance(row_bytes, bool) or row_bytes < 1):
            raise ValueError(f"contract ({source}): expected max_row_bytes to be an int >= 1, but got {row_bytes!r}")
        multiple = d.get("n_multiple_of", 1)
        if not isinstance(multiple, int) or isinstance(multiple, bool) or multiple < 1:
            raise ValueError(f"contract ({source}): expected n_multiple_of to be an int >= 1, but got {multiple!r}")
        if max_n is not None and max_n < multiple:
            raise ValueError(f"contract ({source}): max_n {max_n} admits no N that is a multiple of {multiple}")
        dtypes = choice("dtypes", tuple(DTYPES))
        if row_bytes is not None and row_bytes < min(ITEMSIZE[t] for t in dtypes) * multiple:
            raise ValueError(f"contract ({source}): max_row_bytes {row_bytes} admits no row of the declared dtypes "
                             f"{list(dtypes)} (N a multiple of {multiple})")
        weight_layouts = choice("weight_layouts", WEIGHT_LAYOUTS) if "weight_layouts" in d else None
        if weight_layouts is not None and "contiguous" not in weight_layouts:
            raise ValueError(f"contract ({source}): expected weight_layouts to include 'contiguous' (the weight "
                             f"every caller passes), but got {list(weight_layouts)}")
        zero = d.get("zero_rows", True)
        if not isinstance(zero, bool):
            raise ValueError(f"contract ({source}): expected zero_rows to be true or false, but got {zero!r}")
        exclude = d.get("exclude", [])
        if isinstance(exclude, str) or not isinstance(exclude, (list, tuple)):
            raise ValueError(f"contract ({source}): expected exclude to be a list of classes such as "
                             f"'dtype=bfloat16&n%2', but got {exclude!r}")
        try:
            exclude = tuple(dict.fromkeys(parse_class(c) for c in exclude))
        except ValueError as e:
            raise ValueError(f"contract ({source}): exclude: {e}") from None
        variant = Variant.from_dict(d, source)
        return cls(variant=variant, dtypes=dtypes, weight_dtypes=choice("weight_dtypes", WEIGHT_CHOICES),
                   layouts=choice("layouts", LAYOUTS),
                   weight_layouts=weight_layouts,
                   max_n=max_n, max_row_bytes=row_bytes, n_multiple_of=multiple,
                   zero_rows=zero, source=source, exclude=exclude, inferred=inferred)

    def to_dict(self) -> dict:
        return {"dtypes": list(self.dtypes), "weight_dtypes": list(self.weight_dtypes),
                "layouts": list(self.layouts),
                **({} if self.weight_layouts is None else {"weight_layouts": list(self.weight_layouts)}),
                "max_n": self.max_n, "max_row_bytes": self.max_row_bytes,
                "n_multiple_of": self.n_multiple_of,
                "zero_rows": self.zero_rows,
                **({"exclude": list(self.exclude)} if self.exclude else {}), **self.variant.to_dict()}

    def to_json(self) -> dict:
        """The contract and where it was declared (Contract.from_json reads it back)."""
        return {**self.to_dict(), "source": self.source, "inferred": self.inferred}

    @classmethod
    def from_json(cls, d: dict) -> "Contract":
        d = dict(d)
        source = d.pop("source", "")
        inferred = bool(d.pop("inferred", False))
        return cls.from_dict(d, source, inferred) if source else cls()

    def allows(self, case: Case) -> bool:
        weight_ok = (("same" in self.weight_dtypes and case.weight_dtype == case.dtype)
                     or ("float32" in self.weight_dtypes and case.weight_dtype == "float32"))
        return (case.dtype in self.dtypes and weight_ok
                and case.layout in self.layouts and case.grad_layout in self.layouts
                and case.weight_layout in self.drawn_weight_layouts
                and (self.max_n is None or case.n <= self.max_n) and case.n % self.n_multiple_of == 0
                and case.n <= self.max_n_for(case.dtype)
                and (self.zero_rows or case.rows > 0)
                and not self.excluded(case))

    def max_n_for(self, dtype: str) -> int:
        """The largest N allowed in dtype (max_n, max_row_bytes, and the classes n>M alone or with this
        dtype; no limit: a large number)."""
        n = self.max_n if self.max_n is not None else 1 << 62
        if self.max_row_bytes is not None:
            n = min(n, self.max_row_bytes // ITEMSIZE[dtype])
        for cls in self.exclude:
            conds = cls.split("&")
            above = [parse_condition(c)[1] for c in conds if c.startswith("n>")]
            rest = [c for c in conds if not c.startswith("n>")]
            if above and all(c == f"dtype={dtype}" for c in rest):
                n = min(n, above[0])
        return n

    def describe(self) -> str:
        if self.inferred:
            return ("contract: none declared; inferred from the target's refusals: "
                    + "; ".join(self._parts(inferred=True)) + " (drawn only inside it; a refusal that no class of inputs "
                    "explains fails)")
        if not self.declared:
            return ("contract: none declared (every input is drawn; a refusal is allowed only where a class of inputs "
                    "explains it)")
        refusals = ("a refusal inside it fails" if self.weight_layouts is not None else
                    "a refusal inside it fails, except of a weight that is not contiguous: no weight layouts declared")
        return f"contract ({self.source}): " + "; ".join(self._parts()) + f" (drawn only inside it; {refusals})"

    def _parts(self, inferred: bool = False) -> list[str]:
        parts = [f"dtypes {','.join(self.dtypes)}", f"weight {','.join(self.weight_dtypes)}"]
        if inferred:  # only what the refusals took away
            parts = [f"dtypes {','.join(self.dtypes)}"] if tuple(self.dtypes) != tuple(DTYPES) else []
        if tuple(self.layouts) != LAYOUTS:
            parts.append(f"layouts {','.join(self.layouts)}")
        if self.weight_layouts is not None:
            parts.append(f"weight layouts {','.join(self.weight_layouts)}")
        if self.max_n is not None:
            parts.append(f"N <= {self.max_n}")
        if self.max_row_bytes is not None:
            parts.append(f"rows <= {self.max_row_bytes} bytes (" + ", ".join(
                f"N <= {self.max_n_for(t)} in {t}" for t in self.dtypes) + ")")
        if self.n_multiple_of > 1:
            parts.append(f"N a multiple of {self.n_multiple_of}")
        if not self.zero_rows:
            parts.append("no zero rows")
        if self.exclude:
            parts.append("excluding " + ", ".join(self.exclude))
        if self.variant.to_dict():
            parts.append(self.variant.describe())
        return parts

    def leaves_nothing_for(self, law: str, has_backward: bool) -> str | None:
        """Why the contract leaves a law nothing to draw (it is then not applicable), or None."""
        if law == "row_offsets_past_2_31":
            if "padded" not in self.layouts or "padded" in self.excluded_values("layout"):
                return "the contract's layouts leave out rows padded apart (padded), which its rows 2^30 apart are"
            if not {"bfloat16", "float16", "float32"} & (set(self.dtypes) - self.excluded_values("dtype")):
                return ("the contract's dtypes are float64 alone, whose storage of 2^32 elements would take 32 GiB of "
                        "address space")
        if law == "strided_equals_contiguous":
            strided = [l for l in self.layouts if l != "contiguous" and l not in self.excluded_values("layout")]
            weights = [l for l in self.drawn_weight_layouts
                       if l != "contiguous" and l not in self.excluded_values("weight_layout")]
            if not strided and not weights:
                return ("the contract's layouts are all contiguous (x" + (", grad_out" if has_backward else "")
                        + " and the weight): nothing strided to compare")
        return None

    def declaration(self) -> tuple[str, str]:
        """(the command-line flags, the RMSNORM_CONTRACT entry) that declare this contract."""
        d = {k: v for k, v in self.to_dict().items()
             if v is not None and not (k == "zero_rows" and v) and not (k == "n_multiple_of" and v == 1)
             and not (k == "dtypes" and tuple(v) == tuple(DTYPES)) and not (k == "layouts" and tuple(v) == LAYOUTS)
             and not (k == "weight_dtypes" and tuple(v) == WEIGHT_CHOICES)}
        flags = []
        for key, value in d.items():
            flag = "--" + key.replace("_", "-")
            if key == "zero_rows":
                flags.append("--no-zero-rows")
            elif key == "weight":
                flags.append("--no-weight")
            elif key == "weight_offset":
                flags.append(f"--weight-offset {value:g}")
            elif key == "exclude":
                flags += [f"--exclude '{c}'" for c in value]
            elif isinstance(value, list):
                flags.append(f"{flag} {','.join(value)}")
            else:
                flags.append(f"{flag} {value}")
        return " ".join(flags) or "(no flags: every input)", f"RMSNORM_CONTRACT = {json.dumps(d)}"


ENV = "RMSNORM_CONTRACT"


def from_env() -> Contract | None:
    v = os.environ.get(ENV)
    if not v:
        return None
    try:
        d = json.loads(v)
    except json.JSONDecodeError as e:
        raise ValueError(f"{ENV}: expected JSON, but got {v!r} ({e})") from None
    return Contract.from_dict(d, "command line" if os.environ.get(ENV + "_FROM") == "cli" else ENV)


def from_module(module) -> dict | None:
    """The module's RMSNORM_CONTRACT attribute as a plain dict (validated by the caller)."""
    d = getattr(module, "RMSNORM_CONTRACT", None)
    return None if d is None else {str(k): (list(v) if isinstance(v, (list, tuple)) else v) for k, v in dict(d).items()}


def of_target(module, spec: str) -> Contract:
    """The contract a run holds a loaded target to: the command line's or RMSNORM_CONTRACT, else what
    its module declares, else none declared (what harness.running.session.contract() says, asked in the
    worker, where laws that build their own inputs need it)."""
    c = from_env()
    if c is not None:
        return c
    declared = from_module(module)
    return Contract.from_dict(declared, f"declared by {spec}") if declared else Contract()


def from_args(dtypes: str | None, weight_dtypes: str | None, layouts: str | None, max_n: int | None,
              no_zero_rows: bool, n_multiple_of: int | None = None, max_row_bytes: int | None = None,
              weight_layouts: str | None = None, exclude: list[str] | None = None,
              variant: dict | None = None) -> dict | None:
    """A declaration from command-line options, or None when none was given. variant: the variant keys
    given (residual, residual_dtype, sum, weight_offset, weight, order), each None where not given."""
    d: dict = {k: v for k, v in (variant or {}).items() if v is not None}
    if exclude:
        d["exclude"] = list(exclude)
    for key, val in (("dtypes", dtypes), ("weight_dtypes", weight_dtypes), ("layouts", layouts),
                     ("weight_layouts", weight_layouts)):
        if val:
            d[key] = [v for v in val.split(",") if v]
    if max_n is not None:
        d["max_n"] = max_n
    if max_row_bytes is not None:
        d["max_row_bytes"] = max_row_bytes
    if n_multiple_of is not None:
        d["n_multiple_of"] = n_multiple_of
    if no_zero_rows:
        d["zero_rows"] = False
    if not d:
        return None
    Contract.from_dict(d, "command line")  # validate now: a usage error before anything runs
    return d
