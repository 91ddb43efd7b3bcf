"""Every CUDA path of this project's kernels, swept by row length: each plan regime of
kernels/rmsnorm_plan.h (rows sharing a warp, a CTA, a cluster; 16-CTA clusters; split rows), its edges
(one vector more or less), the fallback (float64, lengths that are not whole vectors,
misaligned rows), padded row strides, and many rows per persistent backward unit. Outputs are
poisoned before each call and judged like the gate judges them. A row's bits must not depend
on the batch it is in, and backward must be bitwise deterministic. CUDA only (the GPU lane)."""

import pytest
import torch

from harness.judging import judge
from harness.judging.laws.common import poison

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the GPU lane runs it)")

EPS = 1e-5
# Row lengths in 16-byte vectors, at the edges of the plan's regimes (forward and backward).
N_VECS = (1, 3, 32, 33, 64, 65, 128, 129, 256, 257, 1000, 1024, 1025, 2048, 2049, 4096, 4097, 8192, 8193, 16384, 16385,
          32768, 32769, 65536)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_ELEMENTS = 1 << 22


def _ops():
    import rmsnorm as ops

    ops.extension()
    return torch.ops.rmsnorm


def _inputs(rows, n, dtype, wdtype, *, pad=0, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    base = torch.randn(rows, n + pad, device="cuda", generator=g).to(dtype)
    x = base[:, :n] if pad else base
    w = (1 + 0.5 * torch.randn(n, device="cuda", generator=g)).to(wdtype)
    dy = torch.randn(rows, n, device="cuda", generator=g).to(dtype)
    return x, w, dy


def _bits(t):
    return t.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()])


def _judge(x, w, dy, what):
    ops = _ops()
    poison(x.device, [x.numel() * x.element_size(), x.shape[0] * 8, w.numel() * w.element_size()])
    y, inv = ops.forward(x, w, EPS)
    msgs = judge.judge_forward(y, inv, x, w, EPS)
    poison(x.device, [x.numel() * x.element_size(), w.numel() * w.element_size()])
    gx, gw = ops.backward(dy, x, w, inv)
    bmsgs, _ = judge.judge_backward(gx, gw, dy, x, w, EPS, inv)
    problems = [str(m) for m in list(msgs) + list(bmsgs) if m]
    assert not problems, f"{what}:\n" + "\n".join(problems)
    return y, inv, gx, gw


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mixed", (False, True), ids=("w:same", "w:float32"))
def test_every_plan_regime_matches_the_reference(dtype, mixed):
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    wdtype = torch.float32 if mixed else dtype
    for n_vec in N_VECS:
        for n in (n_vec * vec, n_vec * vec + 1):  # whole vectors (fast paths), one element more (fallback)
            for rows in (1, 3, 67):
                if rows * n > MAX_ELEMENTS and rows > 1:
                    continue
                x, w, dy = _inputs(rows, n, dtype, wdtype, seed=n_vec + rows)
                _judge(x, w, dy, f"{dtype} w:{wdtype} rows={rows} N={n}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_padded_rows_and_persistent_units(dtype):
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    for n_vec in (1, 33, 512, 4097):
        n = n_vec * vec
        rows = max(1, min(5000, MAX_ELEMENTS // n))  # more rows than a persistent backward has units
        for pad in (vec, 1):  # an aligned row stride, a misaligned one (staged into aligned memory)
            x, w, dy = _inputs(rows, n, dtype, dtype, pad=pad, seed=n_vec)
            _judge(x, w, dy, f"{dtype} rows={rows} N={n} row stride {n + pad}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_persistent_backward_loops_over_many_long_rows(dtype):
    # Persistent units over rows several times their number (132 / cluster): N = 2048 vectors (float32 a
    # register CTA of 1024 threads, 2-byte elements the staged backward, one CTA a row), the staged
    # backward in a cluster of 2 (4096: 66 units), a cluster of 8 (float32 8192), float32's staged backward at
    # 8 vectors a thread (65536: 7 units of 16 CTAs, the next row copied in while a row is in registers); split
    # rows elsewhere (units of 32 rows).
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    for n_vec, rows in ((2048, 300), (4096, 200), (8192, 100), (32768, 20), (65536, 16)):
        x, w, dy = _inputs(rows, n_vec * vec, dtype, dtype, seed=n_vec)
        _judge(x, w, dy, f"{dtype} rows={rows} N={n_vec * vec}")


def test_split_backward_units_of_more_than_32_rows():
    # Past 512 units of 32 rows, a split unit takes more rows: 16,400 rows make 497 units of 33 (the last
    # of 32), each strip of columns walking its unit's rows in runs of four.
    x, w, dy = _inputs(16400, 4097 * 8, torch.bfloat16, torch.float32, seed=3)
    _judge(x, w, dy, "bfloat16 w:float32 rows=16400 N=32776")


def test_float64_takes_the_fallback():
    for n in (1, 64, 4096, 4099):
        x, w, dy = _inputs(5, n, torch.float64, torch.float64, seed=n)
        _judge(x, w, dy, f"float64 N={n}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_row_has_the_same_bits_in_any_batch(dtype):
    ops = _ops()
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    for n in (8 * vec, 128 * vec, 1024 * vec, 4097 * vec, 8193 * vec, 32769 * vec, 1000):
        big = max(2, min(4099, MAX_ELEMENTS // n))
        x, w, dy = _inputs(big, n, dtype, dtype, seed=n)
        y_all, inv_all = ops.forward(x, w, EPS)
        gx_all, _ = ops.backward(dy, x, w, inv_all)
        for rows in sorted({1, 2, 7, big // 2 + 1}):
            y, inv = ops.forward(x[:rows], w, EPS)
            gx, _ = ops.backward(dy[:rows], x[:rows], w, inv)
            assert torch.equal(_bits(y), _bits(y_all[:rows])) and torch.equal(_bits(inv), _bits(inv_all[:rows])), \
                f"{dtype} N={n}: forward of the first {rows} rows differs from the same rows in a batch of {big}"
            assert torch.equal(_bits(gx), _bits(gx_all[:rows])), \
                f"{dtype} N={n}: grad_x of the first {rows} rows differs from the same rows in a batch of {big}"


@pytest.mark.parametrize("dtype", DTYPES + (torch.float64,), ids=str)
def test_every_row_has_its_bits_alone_at_its_own_address(dtype):
    # Each row of a batch, sliced alone where it lies in memory, against the batch: the fallback once
    # counted a single row as aligned whatever its stride, so row 4 of a [5, 7] float32
    # batch (alone: on a 16-byte boundary) took the vector kernel and, in the batch, the scalar
    # one, another summation order (the gate's batch_invariant law on the H200). Rows of a padded
    # or offset layout of a fast-path length likewise took the fast path alone and the fallback
    # in their batch.
    ops = _ops()
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    g = torch.Generator(device="cuda").manual_seed(1)
    for n, pad, offset in ((7, 0, 0), (vec * 8 + 3, 0, 0), (vec * 8, 1, 0), (vec * 8, 0, 1), (vec * 64, 3, 0),
                           (vec * 4097, 1, 0), (vec * 2 ** 15, 0, 1)):
        rows = max(2, min(9, MAX_ELEMENTS // (n + pad)))
        storage = torch.randn(offset + rows * (n + pad), device="cuda", generator=g).to(dtype)
        x = storage[offset:].view(rows, n + pad)[:, :n]
        w = (1 + 0.5 * torch.randn(n, device="cuda", generator=g)).to(dtype)
        dy = torch.randn(rows, n, device="cuda", generator=g).to(dtype)
        y_all, inv_all = ops.forward(x, w, EPS)
        gx_all, _ = ops.backward(dy, x, w, inv_all)
        for r in range(rows):
            y, inv = ops.forward(x[r:r + 1], w, EPS)
            gx, _ = ops.backward(dy[r:r + 1], x[r:r + 1], w, inv)
            where = f"{dtype} N={n} row stride {n + pad} offset {offset}: row {r} of {rows}"
            assert torch.equal(_bits(y), _bits(y_all[r:r + 1])), f"{where}: y alone differs from y in the batch"
            assert torch.equal(_bits(inv), _bits(inv_all[r:r + 1])), f"{where}: inv_rms alone differs"
            assert torch.equal(_bits(gx), _bits(gx_all[r:r + 1])), f"{where}: grad_x alone differs"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_backward_is_bitwise_deterministic(dtype):
    ops = _ops()
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    for n in (4 * vec, 512 * vec, 4097 * vec, 8193 * vec):
        x, w, dy = _inputs(max(1, min(3000, MAX_ELEMENTS // n)), n, dtype, dtype, seed=n)
        _, inv = ops.forward(x, w, EPS)
        first = ops.backward(dy, x, w, inv)
        for _ in range(3):
            again = ops.backward(dy, x, w, inv)
            same = torch.equal(_bits(first[0]), _bits(again[0])) and torch.equal(_bits(first[1]), _bits(again[1]))
            assert same, f"{dtype} N={n}: backward differs run to run"


def _launch_calls(fn) -> list[str]:
    """The runtime or driver calls that launch a kernel, as the profiler saw them during fn()."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if "LaunchKernel" in e.name]


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float64), ids=str)
def test_zero_rows_launch_nothing(dtype):
    # An empty grid is an invalid launch: cudaLaunchKernelEx returns the error rather than leaving it
    # for the launch check (the mutant cuda_zero_rows_empty_grid survived the suite on the H200).
    ops = _ops()
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    for n in (8 * vec, 2048 * vec, 32769 * vec, 7):  # rows in registers, a cluster, split rows, the fallback
        x1, w, dy1 = _inputs(1, n, dtype, dtype)
        assert _launch_calls(lambda: ops.forward(x1, w, EPS)), "the profiler must see a launch (the precondition)"
        x, dy = x1[:0], dy1[:0]
        assert x.shape == (0, n)
        calls = _launch_calls(lambda: ops.forward(x, w, EPS))
        assert not calls, f"{dtype} N={n}: zero rows launched {calls}"
        y, inv = ops.forward(x, w, EPS)
        assert y.shape == (0, n) and inv.shape == (0,)
        gx, gw = ops.backward(dy, x, w, inv)
        torch.cuda.synchronize()
        assert gx.shape == (0, n) and bool((gw == 0).all()), f"{dtype} N={n}: grad_weight of zero rows is not 0"
