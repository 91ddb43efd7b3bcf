"""A test case: everything needed to rebuild the same tensors on any machine.

Values come from a CPU ``torch.Generator`` seeded by ``Case.seed`` and are then copied into
the requested layout on the device, so a case replays bit for bit on CPU and CUDA alike.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields

import torch

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}

# Layouts for x (and grad_out): how the tensor sits in its storage.
LAYOUTS = (
    "contiguous",
    "transposed",  # last dim not unit-stride: storage holds x.transpose(-1, -2)
    "col_step",  # x = storage[..., ::2]
    "row_step",  # x = storage[::2] over the rows
    "offset",  # x = storage[1:]: the data pointer is one element off alignment
    "padded",  # rows padded: x = storage[..., :N] with a wider row stride
    "batch_transposed",  # leading dims permuted, so they do not collapse to one row stride
    "broadcast",  # one row expanded to every row: row stride 0
)

PATTERNS = (
    "normal",  # N(0, 1) times a per-row log-normal scale, so rows differ
    "uniform",
    "huge",  # near the dtype's top: squares overflow fp16; within fp32 accumulation range
    "tiny",  # near and below the dtype's smallest normal
    "constant",  # every row constant
    "zero_rows",  # some rows all zeros
    "spike",  # one element per row 1e4 times the rest
    "nonfinite",  # a few inf, -inf and NaN
)

# Layouts of the weight: a slice of a larger buffer (a fused parameter, a view taken by a caller).
WEIGHT_LAYOUTS = (
    "contiguous",
    "offset",  # weight = storage[1:]: one element off alignment
    "col_step",  # weight = storage[::2]: a stride of 2 elements
)

GAP_FILL = float("nan")  # storage between a strided tensor's elements: read it and it shows

WEIGHT_PATTERNS = (
    "normal",  # N(0, 1)
    "ones",  # unit weights (hide a wrongly indexed weight; torch.nn.RMSNorm's initial value)
    "pow2",  # +-2^k, k in -2..2: grad_out * weight is exact in every dtype, so eager PyTorch's rounding of
             # it costs nothing and the bound on grad_x is the accumulation's alone
)
GRAD_PATTERNS = (
    "normal",  # N(0, 1) times a per-row log-normal scale
    "like_y",  # grad_out = y (rounded to the dtype): every term of the backward's row reduction
               # sum(grad_out * w * x) is positive, so a sum accumulated in low precision shows
)


@dataclass(frozen=True)
class Case:
    shape: tuple[int, ...]
    dtype: str = "float32"
    weight_dtype: str = "float32"
    eps: float = 1e-6
    layout: str = "contiguous"
    grad_layout: str = "contiguous"
    pattern: str = "normal"
    weight_pattern: str = "normal"
    seed: int = 0
    grad_pattern: str = "normal"
    weight_layout: str = "contiguous"

    def __post_init__(self):
        if not isinstance(self.shape, tuple) or not all(isinstance(s, int) and s >= 0 for s in self.shape):
            raise ValueError(f"Case.shape: expected a tuple of non-negative ints, but got {self.shape!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"Case.dtype: expected one of {sorted(DTYPES)}, but got {self.dtype!r}")
        if self.weight_dtype not in DTYPES:
            raise ValueError(f"Case.weight_dtype: expected one of {sorted(DTYPES)}, but got {self.weight_dtype!r}")
        for name, value, allowed in (("layout", self.layout, LAYOUTS), ("grad_layout", self.grad_layout, LAYOUTS),
                                     ("pattern", self.pattern, PATTERNS),
                                     ("weight_pattern", self.weight_pattern, WEIGHT_PATTERNS),
                                     ("grad_pattern", self.grad_pattern, GRAD_PATTERNS),
                                     ("weight_layout", self.weight_layout, WEIGHT_LAYOUTS)):
            if value not in allowed:
                raise ValueError(f"Case.{name}: expected one of {allowed}, but got {value!r}")
        if self.weight_layout != "contiguous" and not layout_possible(self.weight_layout, (self.n,)):
            raise ValueError(f"Case.weight_layout: {self.weight_layout!r} cannot make a weight of {self.n} element(s) "
                             f"non-contiguous; expected 'contiguous' for it")

    # -- geometry -------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self.shape[-1] if self.shape else 0

    @property
    def rows(self) -> int:
        return math.prod(self.shape[:-1]) if self.shape else 0

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def torch_weight_dtype(self) -> torch.dtype:
        return DTYPES[self.weight_dtype]

    def categories(self) -> dict[str, str]:
        """Labels for the run's summary of what was checked and what the target rejected."""
        return {
            "dtype": self.dtype,
            "weight": "float32" if self.weight_dtype != self.dtype else "same",
            "layout": self.layout,
            "weight_layout": self.weight_layout,
            "rank": str(len(self.shape)),
            "rows": "0" if self.rows == 0 else ("1" if self.rows == 1 else (">65535" if self.rows > 65535 else "2..65535")),
            "pattern": self.pattern,
            "eps": "0" if self.eps == 0 else ">0",
        }

    # -- (de)serialisation -----------------------------------------------------------------
    def to_dict(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
        for name, default in (("grad_pattern", "normal"), ("weight_layout", "contiguous")):
            if d[name] == default:  # as before the field existed: saved cases keep their names
                del d[name]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Case":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"Case: unknown fields {sorted(unknown)}; expected some of {sorted(known)}")
        d = dict(d)
        d["shape"] = tuple(int(s) for s in d["shape"])
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def short(self) -> str:
        grad = f" grad={self.grad_pattern}" if self.grad_pattern != "normal" else ""
        wl = f" weight_layout={self.weight_layout}" if self.weight_layout != "contiguous" else ""
        return (f"shape={list(self.shape)} {self.dtype}/w:{self.weight_dtype} eps={self.eps:g} "
                f"layout={self.layout} grad_layout={self.grad_layout} pattern={self.pattern} "
                f"weight={self.weight_pattern}{grad}{wl} seed={self.seed}")


def layout_possible(layout: str, shape: tuple[int, ...]) -> bool:
    """Whether layout makes a non-contiguous (or misaligned) tensor of this shape."""
    n = shape[-1]
    rows = math.prod(shape[:-1])
    if layout == "contiguous":
        return True
    if math.prod(shape) == 0:  # an empty tensor is contiguous whatever its strides
        return False
    if layout == "offset":
        return True
    if layout == "transposed":
        return len(shape) >= 2 and shape[-2] >= 2 and n >= 2
    if layout == "col_step":
        return n >= 2 and rows >= 1
    if layout in ("row_step", "padded"):
        return len(shape) >= 2 and shape[-2] >= 2
    if layout == "batch_transposed":
        return len(shape) >= 3 and shape[0] >= 2 and shape[1] >= 2
    if layout == "broadcast":
        return len(shape) >= 2 and rows >= 2
    raise ValueError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")


def _row_scale(gen, shape) -> torch.Tensor:
    lead = shape[:-1]
    return torch.exp(torch.randn(*lead, 1, generator=gen, dtype=torch.float64))


def values(pattern: str, shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """float64 values of a pattern (the caller casts them), shaped `shape`."""
    if math.prod(shape) == 0:
        return torch.zeros(shape, dtype=torch.float64)
    n = shape[-1]
    base = torch.randn(*shape, generator=gen, dtype=torch.float64)
    if pattern == "normal":
        return base * _row_scale(gen, shape)
    if pattern == "uniform":
        return (torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1) * _row_scale(gen, shape)
    if pattern == "huge":
        if dtype == torch.float16:  # squares overflow fp16 (> 256), values stay below 65504
            mag = 256 + torch.rand(*shape, generator=gen, dtype=torch.float64) * 6.0e4
            return mag * torch.sign(base)
        scale = 1e150 if dtype == torch.float64 else 1e15
        return base.clamp(-6, 6) * scale
    if pattern == "tiny":
        if dtype == torch.float16:
            return base * 1e-6  # mostly fp16 subnormals (below 6.1e-5)
        fi = torch.finfo(dtype)
        out = base * fi.tiny * 2.0**10
        sub = torch.rand(*shape, generator=gen) < 0.25
        return torch.where(sub, base.clamp(-1, 1) * fi.tiny * 0.5, out)
    if pattern == "constant":
        lead = shape[:-1]
        c = torch.randn(*lead, 1, generator=gen, dtype=torch.float64)
        return c.expand(shape).clone()
    if pattern == "zero_rows":
        v = base * _row_scale(gen, shape)
        rows = v.reshape(-1, n)
        zero = torch.rand(rows.shape[0], generator=gen) < 0.4
        zero[int(torch.randint(rows.shape[0], (1,), generator=gen))] = True
        rows[zero] = 0
        return rows.reshape(shape)
    if pattern == "spike":
        rows = (base * 1e-2).reshape(-1, n)
        col = torch.randint(n, (rows.shape[0],), generator=gen)
        rows[torch.arange(rows.shape[0]), col] = 1e2 * torch.sign(torch.randn(rows.shape[0], generator=gen, dtype=torch.float64))
        return rows.reshape(shape)
    if pattern == "nonfinite":
        flat = (base * _row_scale(gen, shape)).reshape(-1)
        k = 1 + int(torch.randint(3, (1,), generator=gen))
        pos = torch.randint(flat.numel(), (k,), generator=gen)
        specials = torch.tensor([float("inf"), float("-inf"), float("nan")], dtype=torch.float64)
        flat[pos] = specials[torch.randint(3, (k,), generator=gen)]
        return flat.reshape(shape)
    raise ValueError(f"unknown pattern {pattern!r}; expected one of {PATTERNS}")


def place(v: torch.Tensor, layout: str, device, gen: torch.Generator) -> torch.Tensor:
    """Copy v (already in its dtype) into a tensor with the given layout on device."""
    shape = tuple(v.shape)
    if not layout_possible(layout, shape):
        raise ValueError(f"layout {layout!r} cannot make shape {list(shape)} non-contiguous")
    dt = v.dtype
    if layout == "contiguous":
        return v.to(device).contiguous()
    if layout == "broadcast":
        row = v.reshape(-1, shape[-1])[:1].reshape((1,) * (len(shape) - 1) + (shape[-1],))
        return row.to(device).expand(shape)
    if layout == "offset":
        store = torch.full((v.numel() + 1,), GAP_FILL, dtype=dt, device=device)
        out = store[1:].view(shape)
    elif layout == "transposed":
        tshape = shape[:-2] + (shape[-1], shape[-2])
        out = torch.full(tshape, GAP_FILL, dtype=dt, device=device).transpose(-1, -2)
    elif layout == "col_step":
        out = torch.full(shape[:-1] + (2 * shape[-1],), GAP_FILL, dtype=dt, device=device)[..., ::2]
    elif layout == "row_step":
        big = shape[:-2] + (2 * shape[-2], shape[-1])
        out = torch.full(big, GAP_FILL, dtype=dt, device=device)[..., ::2, :]
    elif layout == "padded":
        pad = 1 + int(torch.randint(8, (1,), generator=gen))
        out = torch.full(shape[:-1] + (shape[-1] + pad,), GAP_FILL, dtype=dt, device=device)[..., : shape[-1]]
    elif layout == "batch_transposed":
        sw = (shape[1], shape[0]) + shape[2:]
        out = torch.full(sw, GAP_FILL, dtype=dt, device=device).transpose(0, 1)
    else:
        raise ValueError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")
    out.copy_(v.to(device))
    if layout == "offset":
        assert out.data_ptr() % (2 * out.element_size()) != 0 or out.element_size() >= 16, "offset layout is aligned"
    else:
        assert not out.is_contiguous(), f"layout {layout} produced a contiguous tensor for shape {list(shape)}"
    return out


class Tensors:
    """A case's x and weight, and its grad_out, drawn on first use: a law of the forward alone
    never asks for it (a third of a CPU gate's drawing went to grad_outs nobody read). It is drawn
    from the generator's state after the weight, so its bits are the same whenever it is drawn."""

    def __init__(self, x: torch.Tensor, weight: torch.Tensor, draw_grad_out) -> None:
        self.x, self.weight = x, weight
        self._draw, self._grad_out = draw_grad_out, None

    @property
    def grad_out(self) -> torch.Tensor:
        if self._draw is not None:
            self._grad_out, self._draw = self._draw(), None
        return self._grad_out


def materialize(case: Case, device) -> Tensors:
    """The case's x, weight and grad_out on device, bit-identical on every machine."""
    gen = torch.Generator().manual_seed(case.seed)
    dt = case.torch_dtype
    xv = values(case.pattern, case.shape, dt, gen).to(dt)
    if case.layout == "broadcast" and case.numel:
        xv = xv.reshape(-1, case.n)[:1].expand(case.rows, case.n).reshape(case.shape)
    x = place(xv, case.layout, device, gen)
    if case.weight_pattern == "ones":
        w = torch.ones(case.n, dtype=case.torch_weight_dtype)
    elif case.weight_pattern == "pow2":
        k = torch.randint(-2, 3, (case.n,), generator=gen).to(torch.float64)
        sign = torch.where(torch.rand(case.n, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
        w = (sign * 2.0**k).to(case.torch_weight_dtype)
    else:
        w = torch.randn(case.n, generator=gen, dtype=torch.float64).to(case.torch_weight_dtype)
    state = gen.get_state()
    x_values = xv if case.grad_pattern == "like_y" else None  # kept only where grad_out is made from it

    def draw_grad_out() -> torch.Tensor:
        gen.set_state(state)
        gv = (torch.randn(*case.shape, generator=gen, dtype=torch.float64) * _row_scale(gen, case.shape)
              if case.numel else torch.zeros(case.shape, dtype=torch.float64)).to(dt)
        if case.grad_pattern == "like_y" and case.numel:
            x64 = x_values.to(torch.float64)
            inv = torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + case.eps)
            gv = torch.nan_to_num(x64 * inv * w.to(torch.float64)).to(dt)
        if case.grad_layout == "broadcast" and case.numel:
            gv = gv.reshape(-1, case.n)[:1].expand(case.rows, case.n).reshape(case.shape)
        return place(gv, case.grad_layout, device, gen)

    return Tensors(x, place(w, case.weight_layout, device, gen), draw_grad_out)
