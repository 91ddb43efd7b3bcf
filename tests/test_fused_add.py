"""rmsnorm's users' forms on the CPU: the fused residual add, Gemma's weight offset and no weight, in
the declared rounding order (rmsnorm/__init__.py's docstring), judged against a float64 reference
written here; the in-place add; gradients; the operators' registrations; the module."""

from __future__ import annotations

import itertools

import pytest
import torch

from rmsnorm import RMSNorm, extension, rms_norm

F32, F64, BF16, F16 = torch.float32, torch.float64, torch.bfloat16, torch.float16
DTYPES = (F32, F64, BF16, F16)
EPS = 1e-5
# Odd lengths on purpose: 1, a tail shorter than the 8-wide partial sums, 3 * 256 + 1, 2^12 + 1.
NS = (1, 7, 769, 4097)


@pytest.fixture(scope="module", autouse=True)
def _built():
    extension()  # builds or loads the extension and registers the fake implementations


def _acc(dtype: torch.dtype) -> torch.dtype:
    return F64 if dtype == F64 else F32


def fused_ref(x, weight, eps, residual=None, weight_offset=0.0):
    """(y, residual_out) in float64 in the declared order: s = x + residual rounded once to float32
    (float64 for float64 x), the only rounding before y's; residual_out = s rounded to the residual's
    dtype; y = s * rsqrt(mean(s^2) + eps) * (w + weight_offset), all in float64."""
    s = x.double() if residual is None else x.double() + residual.double()
    s = s.to(_acc(x.dtype)).double()
    inv = torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps)
    y = s * inv
    if weight is not None:
        y = y * (weight.double() + weight_offset)
    return y, None if residual is None else s.to(residual.dtype)


def assert_rounded_from(y: torch.Tensor, ref: torch.Tensor, rel: float) -> None:
    """y is ref (float64) give or take `rel` relative, rounded once to y's dtype: every element lies
    between the roundings of ref * (1 - rel) and ref * (1 + rel). A 16-bit y rounded twice, or
    computed from a rounded sum or weight, falls outside on many elements (2^-9 relative for bf16)."""
    assert y.shape == ref.shape, (y.shape, ref.shape)
    lo = (ref - rel * ref.abs()).to(y.dtype).double()
    hi = (ref + rel * ref.abs()).to(y.dtype).double()
    got = y.double()
    bad = ~((lo <= got) & (got <= hi))
    if bad.any():
        i = bad.nonzero()[0].tolist()
        raise AssertionError(f"{int(bad.sum())} of {y.numel()} elements of {y.dtype} off the declared rounding; "
                             f"first at {i}: got {got[tuple(i)].item()!r}, reference {ref[tuple(i)].item()!r}")


# The float32 computation's own error, relative: the sum of squares of N = 4097 terms, a square root
# and two products; far below a 16-bit ulp (2^-8 for float16, 2^-7 for bfloat16).
REL = {F32: 2e-5, F64: 1e-12}


def _rel(dtype):
    return REL[_acc(dtype)]


def _randn(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=F64).to(dtype)


def _strided(t: torch.Tensor, layout: str) -> torch.Tensor:
    """t's values in another layout: every other column of a buffer twice as wide (rows collapse to
    one stride) or transposed (the last dimension not unit-stride: the binding copies it)."""
    if layout == "contiguous":
        return t.contiguous()
    if layout == "sliced":
        buf = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
        out = buf[..., ::2]
        out.copy_(t)
    else:
        out = t.transpose(-1, -2).contiguous().transpose(-1, -2)
    assert not out.is_contiguous() and torch.equal(out, t)
    return out


# (x dtype, residual: None / "same" / float32, weight: "same" / float32 / None, weight_offset)
FORMS = [
    (dt, res, w, off)
    for dt, res, w, off in itertools.product(DTYPES, (None, "same", F32), ("same", F32, None), (0.0, 1.0))
    if not (w is None and off)
]


def _name(v) -> str:
    return "none" if v is None else ("same" if v == "same" else str(v).replace("torch.", ""))


def _form_id(form):
    dt, res, w, off = form
    return f"{_name(dt)}-res_{_name(res)}-w_{_name(w)}-off{off:g}"


def _make(form, rows, n, *, seed, layout="contiguous"):
    dt, res, w, off = form
    x = _strided(_randn((rows, n), dt, seed), layout)
    r = None if res is None else _strided(_randn((rows, n), dt if res == "same" else res, seed + 1), layout)
    weight = None
    if w is not None:
        # Around 0.1 with offset 1 (Gemma's small learned weights), around 1 without.
        weight = (_randn((n,), F64, seed + 2) * 0.1 + (1.0 - off)).to(dt if w == "same" else w)
    return x, weight, r, off


@pytest.mark.parametrize("form", FORMS, ids=_form_id)
def test_outputs_follow_the_declared_rounding_order(form):
    # (A transposed [rows, 1] is contiguous: N = 1 has the other two layouts.)
    for n, layout in itertools.product(NS, ("contiguous", "sliced", "transposed")):
        if n == 1 and layout == "transposed":
            continue
        x, w, r, off = _make(form, 3, n, seed=n, layout=layout)
        out = rms_norm(x, w, EPS, r, off)
        y, residual_out = (out, None) if r is None else out
        y_ref, res_ref = fused_ref(x, w, EPS, r, off)
        assert y.dtype == x.dtype
        assert_rounded_from(y, y_ref, _rel(x.dtype))
        if r is not None:
            # The sum's rounding to the residual's dtype is declared exactly: bitwise.
            assert residual_out.dtype == r.dtype and torch.equal(residual_out, res_ref), (n, layout)


@pytest.mark.parametrize("form", [f for f in FORMS if f[0] in (BF16, F16) and f[1] == "same"], ids=_form_id)
def test_the_float32_sum_is_normalised_not_its_rounding(form):
    # Both orders ship: HF eager and Liger normalise residual_out (the sum rounded to 16 bits), vLLM's
    # native path, FlashInfer, flash-attn and quack the float32 sum, the order declared here. A 16-bit
    # y tells them apart.
    x, w, r, off = _make(form, 8, 769, seed=3)
    y, residual_out = rms_norm(x, w, EPS, r, off)
    other, _ = fused_ref(residual_out, w, EPS, None, off)
    assert not torch.equal(y, other.to(y.dtype))
    assert_rounded_from(y, fused_ref(x, w, EPS, r, off)[0], _rel(x.dtype))


@pytest.mark.parametrize("dtype", (BF16, F16), ids=str)
def test_the_offset_is_added_after_the_weight_is_promoted(dtype):
    # 1 + w rounded in bfloat16 loses w's low bits: the weight's small values are where Gemma's
    # checkpoints live.
    x = _randn((4, 257), dtype, 5)
    w = (_randn((257,), F64, 6) * 0.01).to(dtype)
    y = rms_norm(x, w, EPS, None, 1.0)
    rounded_first, _ = fused_ref(x, (w + 1).to(dtype), EPS)
    assert not torch.equal(y, rounded_first.to(dtype))
    assert_rounded_from(y, fused_ref(x, w, EPS, None, 1.0)[0], _rel(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_forms_without_extras_are_the_plain_operator_bitwise(dtype):
    x = _randn((5, 769), dtype, 7)
    w = _randn((769,), dtype, 8)
    assert torch.equal(rms_norm(x, w, EPS), torch.ops.rmsnorm.forward(x, w, EPS)[0])
    # No weight is a weight of ones, the sum and the statistics in float32 (float64), y rounded once.
    acc = _acc(dtype)
    ones = torch.ones(769, dtype=acc)
    assert torch.equal(rms_norm(x, None, EPS), torch.ops.rmsnorm.forward(x.to(acc), ones, EPS)[0].to(dtype))


@pytest.mark.parametrize("shape", ((0, 7), (2, 0, 7)), ids=str)
def test_zero_rows(shape):
    x = torch.empty(shape, dtype=BF16, requires_grad=True)
    r = torch.empty(shape, dtype=F32, requires_grad=True)
    w = torch.ones(7, dtype=BF16, requires_grad=True)
    y, residual_out = rms_norm(x, w, EPS, r, 1.0)
    assert y.shape == shape and y.dtype == BF16 and residual_out.shape == shape and residual_out.dtype == F32
    (y.float().sum() + residual_out.sum()).backward()
    assert x.grad.shape == shape and r.grad.shape == shape
    assert torch.equal(w.grad, torch.zeros(7, dtype=BF16))
    with torch.no_grad():
        xi, ri = torch.empty(shape, dtype=BF16), torch.empty(shape, dtype=F32)
        assert rms_norm(xi, w, EPS, ri, in_place=True) == (xi, ri)


# ---- the in-place add (vLLM's fused_add_rms_norm) ----------------------------------------------

@pytest.mark.parametrize("form", [f for f in FORMS if f[1] is not None], ids=_form_id)
def test_in_place_writes_y_into_x_and_the_sum_into_residual(form):
    for layout in ("contiguous", "sliced", "transposed"):
        x, w, r, off = _make(form, 6, 769, seed=11, layout=layout)
        y_want, res_want = rms_norm(x, w, EPS, r, off)
        x_ptr, r_ptr, x_version = x.data_ptr(), r.data_ptr(), x._version
        with torch.no_grad():
            out = rms_norm(x, w, EPS, r, off, in_place=True)
        assert out[0] is x and out[1] is r
        assert x.data_ptr() == x_ptr and r.data_ptr() == r_ptr and x._version > x_version
        assert torch.equal(x, y_want) and torch.equal(r, res_want), layout


def test_in_place_leaves_the_rest_of_a_buffer_alone():
    # Two strided views of one buffer, in rows apart: the even columns of the top half, the odd of
    # the bottom (views whose rows interleave are refused, below).
    buf = _randn((8, 16), F32, 12)
    keep = buf.clone()
    x, r = buf[:4, ::2], buf[4:, 1::2]
    y_want, res_want = rms_norm(x, None, EPS, r)
    rms_norm(x, None, EPS, r, in_place=True)
    assert torch.equal(x, y_want) and torch.equal(r, res_want)
    untouched = torch.ones_like(buf, dtype=torch.bool)
    untouched[:4, ::2] = False
    untouched[4:, 1::2] = False
    assert torch.equal(buf[untouched], keep[untouched])


def _aliased_cases():
    base = torch.randn(4, 16)
    w = torch.randn(8)
    return {
        "residual is x": (base[:, :8], base[:, :8], None, "got the same memory"),
        "residual a view of x": (base[:, :8], base[:, :8].view(4, 8), None, "got the same memory"),
        "overlapping rows": (base.view(-1)[:32].view(4, 8), base.view(-1)[4:36].view(4, 8), None, "overlapping"),
        "overlapping strided views": (base[:, :8], base[:, 4:12], None, "x and residual in separate memory"),
        "interleaved views": (base[:, ::2], base[:, 1::2], None, "x and residual in separate memory"),
        "weight inside x": (base[:, :8], torch.randn(4, 8), base[0, :8], "x and weight in separate memory"),
        "expanded x": (w.expand(4, 8), torch.randn(4, 8), None, "one element per memory location"),
    }


@pytest.mark.parametrize("case", list(_aliased_cases()), ids=str)
def test_in_place_refuses_memory_it_would_overwrite_while_reading(case):
    x, r, w, message = _aliased_cases()[case]
    before = (x.clone(), r.clone())
    with pytest.raises(ValueError, match=message):
        rms_norm(x, w, EPS, r, in_place=True)
    assert torch.equal(x, before[0]) and torch.equal(r, before[1])  # raised before a kernel ran


def test_in_place_refuses_where_autograd_would_record_it():
    w = torch.ones(8, requires_grad=True)
    for grads in ((True, False, False), (False, True, False), (False, False, True)):
        x = torch.randn(4, 8, requires_grad=grads[0])
        r = torch.randn(4, 8, requires_grad=grads[1])
        weight = w if grads[2] else w.detach()
        with pytest.raises(RuntimeError, match="in_place=True only where autograd records nothing"):
            rms_norm(x, weight, EPS, r, in_place=True)
        with torch.no_grad():
            rms_norm(x, weight, EPS, r, in_place=True)
    with torch.inference_mode():
        x, r = torch.randn(4, 8), torch.randn(4, 8)
        rms_norm(x, w, EPS, r, in_place=True)


def test_in_place_needs_a_residual():
    with pytest.raises(ValueError, match="expected a residual with in_place=True"):
        rms_norm(torch.randn(2, 8), torch.ones(8), EPS, in_place=True)


# ---- argument checks -------------------------------------------------------------------------

@pytest.mark.parametrize("call,error,message", [
    (lambda: rms_norm(torch.randn(2, 8), None, EPS, None, 1.0), ValueError,
     r"expected weight_offset 0 without a weight \(y = x \* inv_rms\), but got 1.0"),
    (lambda: rms_norm(torch.randn(2, 8), torch.ones(8), EPS, torch.randn(2, 9)), ValueError,
     r"rmsnorm: expected residual of shape \[2, 8\] \(the shape of x\), but got residual of shape \[2, 9\]"),
    (lambda: rms_norm(torch.randn(2, 8, dtype=BF16), None, EPS, torch.randn(2, 8, dtype=F16)), TypeError,
     r"rmsnorm: expected residual of dtype BFloat16 \(the dtype of x\) or float32, but got Half"),
    (lambda: rms_norm(torch.randn(2, 8), torch.ones(8), EPS, None, float("inf")), ValueError,
     r"rmsnorm: expected weight_offset to be finite, but got inf"),
    (lambda: rms_norm(torch.randn(2, 8), torch.ones(9), EPS, torch.randn(2, 8)), ValueError,
     r"rmsnorm: expected weight of shape \[8\]"),
    (lambda: rms_norm(torch.randn(2, 8, dtype=F16), torch.ones(8, dtype=BF16), EPS, None, 1.0), TypeError,
     r"rmsnorm: expected weight of dtype Half \(the dtype of x\) or float32, but got BFloat16"),
], ids=["offset-without-weight", "residual-shape", "residual-dtype", "offset-inf",
        "weight-shape", "weight-dtype"])
def test_arguments_outside_the_contract_raise_clearly(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ---- gradients -------------------------------------------------------------------------------

GRAD_FORMS = [(res, w, off) for res, w, off in itertools.product((False, True), (True, False), (0.0, 1.0))
              if w or not off]


@pytest.mark.parametrize("res,weighted,off", GRAD_FORMS,
                         ids=[f"res{int(a)}-w{int(b)}-off{c:g}" for a, b, c in GRAD_FORMS])
def test_gradcheck_in_float64(res, weighted, off):
    g = torch.Generator().manual_seed(13)
    x = torch.randn(3, 7, dtype=F64, generator=g, requires_grad=True)
    r = torch.randn(3, 7, dtype=F64, generator=g, requires_grad=True) if res else None
    w = torch.randn(7, dtype=F64, generator=g, requires_grad=True) if weighted else None
    inputs = tuple(t for t in (x, r, w) if t is not None)

    def unpack(args):
        it = iter(args)
        return next(it), next(it) if res else None, next(it) if weighted else None

    def through_rms_norm(*args):
        a, b, c = unpack(args)
        return rms_norm(a, c, 1e-3, b, off)

    assert torch.autograd.gradcheck(through_rms_norm, inputs)


@pytest.mark.parametrize("form", [f for f in FORMS if f[1] is not None and f[0] != F64], ids=_form_id)
def test_gradients_in_every_dtype_against_float64_autograd(form):
    # g_s = grad_residual_out + (dy/ds)^T grad_y, to x's and the residual's dtypes; grad_weight to
    # the weight's. The reference differentiates fused_ref in float64.
    x, w, r, off = _make(form, 6, 769, seed=17)
    leaves = [t.detach().requires_grad_() for t in (x, r) + ((w,) if w is not None else ())]
    y, residual_out = rms_norm(leaves[0], leaves[2] if w is not None else None, EPS, leaves[1], off)
    gy = _randn(y.shape, y.dtype, 18)
    gres = _randn(residual_out.shape, residual_out.dtype, 19)
    grads = torch.autograd.grad((y, residual_out), leaves, (gy, gres))
    refs = [t.detach().double().requires_grad_() for t in leaves]
    s = refs[0] + refs[1]
    y_ref = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + EPS)
    if w is not None:
        y_ref = y_ref * (refs[2] + off)
    want = torch.autograd.grad((y_ref, s), refs, (gy.double(), gres.double()))
    for got, ref, name in zip(grads, want, ("x", "residual", "weight")):
        assert got.dtype == leaves[("x", "residual", "weight").index(name)].dtype, name
        tol = {F32: 1e-4, BF16: 3e-2, F16: 4e-3}[got.dtype]
        scale = ref.abs().max().item()
        torch.testing.assert_close(got.double(), ref, rtol=tol, atol=tol * scale, msg=name)
    if r.dtype == x.dtype:
        assert torch.equal(grads[0], grads[1])  # both are g_s in one dtype
        assert grads[0].data_ptr() != grads[1].data_ptr()


def test_only_the_residual_out_gradient_passes_straight_through():
    # y unused: x and residual each get grad_residual_out unchanged (the prenorm grouping).
    x = torch.randn(3, 8, dtype=F64, requires_grad=True)
    r = torch.randn(3, 8, dtype=F64, requires_grad=True)
    _, residual_out = rms_norm(x, torch.ones(8, dtype=F64), EPS, r)
    g = torch.randn(3, 8, dtype=F64)
    gx, gr = torch.autograd.grad(residual_out, (x, r), g)
    assert torch.equal(gx, g) and torch.equal(gr, g)


# ---- the operators' registrations ---------------------------------------------------------------

def _op_cases():
    g = torch.Generator().manual_seed(21)
    x = torch.randn(3, 17, dtype=F32, generator=g)
    xb = x.to(BF16)
    r32 = torch.randn(3, 17, dtype=F32, generator=g)
    w = torch.randn(17, dtype=F32, generator=g)
    return [
        (x, w, r32, 0.0),
        (xb, w.to(BF16), r32.to(BF16), 1.0),
        (xb, w, r32, 1.0),
        (xb, None, None, 0.0),
        (x[:, ::2], None, r32[:, ::2], 0.0),
    ]


def _composed_inputs(x, w, r, off):
    """The plain operator's inputs where a fused form calls it (rmsnorm._op._fused)."""
    acc = _acc(x.dtype)
    s = x.to(acc) if r is None else x.to(acc) + r.to(acc)
    return s, (torch.ones(x.shape[-1], dtype=acc) if w is None else w.to(acc) + off)


@pytest.mark.parametrize("i", range(5))
def test_opcheck_of_the_operator_the_fused_forms_call(i):
    s, w = _composed_inputs(*_op_cases()[i])
    torch.library.opcheck(torch.ops.rmsnorm.forward.default, (s.requires_grad_(), w.requires_grad_(), EPS))
    _, inv = torch.ops.rmsnorm.forward(s.detach(), w.detach(), EPS)
    torch.library.opcheck(torch.ops.rmsnorm.backward.default, (torch.randn_like(s), s.detach(), w.detach(), inv))


def test_compiled_fullgraph_matches_eager_bitwise():
    norm = RMSNorm(64, eps=EPS, weight_offset=1.0)
    with torch.no_grad():
        norm.weight.copy_(_randn((64,), F32, 35) * 0.1)
    x = _randn((4, 64), F32, 36).requires_grad_()
    r = _randn((4, 64), F32, 37).requires_grad_()
    y, residual_out = torch.compile(norm, fullgraph=True)(x, r)
    y0, residual_out0 = norm(x, r)
    assert torch.equal(y, y0) and torch.equal(residual_out, residual_out0)
    got = torch.autograd.grad((y, residual_out), (x, r, norm.weight), (torch.ones_like(y), y0.detach()))
    want = torch.autograd.grad((y0, residual_out0), (x, r, norm.weight), (torch.ones_like(y), y0.detach()))
    assert all(torch.equal(a, b) for a, b in zip(got, want))

    @torch.compile(fullgraph=True)
    def add_in_place(a, b, w):
        return rms_norm(a, w, EPS, b, 1.0, in_place=True)

    with torch.no_grad():
        a, b = x.detach().clone(), r.detach().clone()
        add_in_place(a, b, norm.weight)
    assert torch.equal(a, y0) and torch.equal(b, residual_out0)

# ---- the module ------------------------------------------------------------------------------

def test_gemma_module_starts_from_zero_weights_and_scales_by_one_plus_w():
    norm = RMSNorm(33, eps=EPS, weight_offset=1.0, dtype=BF16)
    assert torch.equal(norm.weight, torch.zeros(33, dtype=BF16)) and "weight_offset=1.0" in repr(norm)
    x = _randn((4, 33), BF16, 23)
    assert torch.equal(norm(x), rms_norm(x, None, EPS))  # 1 + 0: the bare norm
    with torch.no_grad():
        norm.weight.copy_(_randn((33,), BF16, 24) * 0.1)
    assert torch.equal(norm(x), rms_norm(x, norm.weight, EPS, None, 1.0))
    norm(x).float().sum().backward()
    assert norm.weight.grad is not None and norm.weight.grad.dtype == BF16
    assert torch.equal(RMSNorm(33, weight_offset=0.5).weight, torch.ones(33))


def test_module_without_a_weight():
    norm = RMSNorm(7, eps=EPS, elementwise_affine=False)
    assert norm.weight is None and list(norm.parameters()) == []
    x, r = _randn((5, 7), F16, 25), _randn((5, 7), F32, 26)
    assert_rounded_from(norm(x), fused_ref(x, None, EPS)[0], _rel(F16))
    y, residual_out = norm(x, r)
    y_ref, res_ref = fused_ref(x, None, EPS, r)
    assert_rounded_from(y, y_ref, _rel(F16))
    assert torch.equal(residual_out, res_ref)
    with pytest.raises(ValueError, match=r"expected weight_offset 0 without a weight \(elementwise_affine=False\)"):
        RMSNorm(7, elementwise_affine=False, weight_offset=1.0)


@pytest.mark.parametrize("normalized", (769, (3, 5)), ids=str)
def test_module_forward_with_a_residual(normalized):
    shape = (2, 4) + ((normalized,) if isinstance(normalized, int) else normalized)
    norm = RMSNorm(normalized, eps=EPS, dtype=BF16)
    with torch.no_grad():
        norm.weight.copy_(_randn(norm.weight.shape, BF16, 27))
    x = _randn(shape, BF16, 28).requires_grad_()
    r = _randn(shape, F32, 29).requires_grad_()
    y, residual_out = norm(x, r)
    assert y.shape == shape and y.dtype == BF16 and residual_out.shape == shape and residual_out.dtype == F32
    n = norm.weight.numel()
    y_ref, res_ref = fused_ref(x.detach().reshape(-1, n), norm.weight.detach().reshape(n), EPS,
                               r.detach().reshape(-1, n))
    assert_rounded_from(y.detach().reshape(-1, n), y_ref, _rel(BF16))
    assert torch.equal(residual_out.detach().reshape(-1, n), res_ref)
    (y.float().sum() + residual_out.sum()).backward()
    assert x.grad.dtype == BF16 and r.grad.dtype == F32 and norm.weight.grad.shape == norm.weight.shape
    with pytest.raises(ValueError, match="expected residual of the input's shape"):
        norm(x, r[:1])


# ---- CUDA: ATen ops around the plain kernels (binding/rmsnorm_cuda.cpp), the same order ----------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: the CUDA registration is "
                                                                 "compiled by the build, not run")


def _to_cuda(t, layout):
    return None if t is None else _strided(t.cuda(), layout) if layout != "contiguous" else t.cuda()


@cuda
@pytest.mark.parametrize("form", FORMS, ids=_form_id)
def test_cuda_outputs_follow_the_declared_rounding_order(form):
    for n, layout in itertools.product(NS, ("contiguous", "sliced")):
        x, w, r, off = _make(form, 3, n, seed=n)
        out = rms_norm(_to_cuda(x, layout), None if w is None else w.cuda(), EPS, _to_cuda(r, layout), off)
        y, residual_out = (out, None) if r is None else out
        y_ref, res_ref = fused_ref(x, w, EPS, r, off)
        assert y.is_cuda and y.dtype == x.dtype
        assert_rounded_from(y.cpu(), y_ref, _rel(x.dtype))
        if r is not None:
            assert residual_out.dtype == r.dtype and torch.equal(residual_out.cpu(), res_ref), (n, layout)


@cuda
@pytest.mark.parametrize("form", [f for f in FORMS if f[1] is not None and f[0] != F64], ids=_form_id)
def test_cuda_gradients_match_the_cpu_kernels(form):
    x, w, r, off = _make(form, 6, 769, seed=31)
    got = []
    for device in ("cpu", "cuda"):
        leaves = [t.detach().to(device).requires_grad_() for t in (x, r) + ((w,) if w is not None else ())]
        y, residual_out = rms_norm(leaves[0], leaves[2] if w is not None else None, EPS, leaves[1], off)
        gy = _randn(y.shape, y.dtype, 32).to(device)
        gres = _randn(residual_out.shape, residual_out.dtype, 33).to(device)
        got.append([g.cpu() for g in torch.autograd.grad((y, residual_out), leaves, (gy, gres))])
    for a, b in zip(*got):
        assert a.dtype == b.dtype
        tol = {F32: 1e-5, BF16: 2e-2, F16: 2e-3}[a.dtype]
        torch.testing.assert_close(b, a, rtol=tol, atol=tol * a.abs().max().item())


@cuda
@pytest.mark.parametrize("form", [(F32, "same", "same", 0.0), (BF16, F32, F32, 1.0), (F16, "same", None, 0.0)],
                         ids=_form_id)
def test_cuda_in_place_and_opcheck(form):
    x, w, r, off = _make(form, 4, 769, seed=34)
    x, r, w = x.cuda(), r.cuda(), None if w is None else w.cuda()
    y_want, res_want = rms_norm(x, w, EPS, r, off)
    with torch.no_grad():
        assert rms_norm(x, w, EPS, r, off, in_place=True) == (x, r)
    assert torch.equal(x, y_want) and torch.equal(r, res_want)
    with pytest.raises(ValueError, match="got the same memory for both"):
        rms_norm(x, w, EPS, x, off, in_place=True)
    s, w32 = _composed_inputs(x, w, r, off)
    torch.library.opcheck(torch.ops.rmsnorm.forward.default, (s.requires_grad_(), w32.requires_grad_(), EPS))
