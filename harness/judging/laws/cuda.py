"""CUDA-only laws: past 2^31 elements (with the cross-process turn for big cases), the current
stream, CUDA graphs."""

from __future__ import annotations

import contextlib

import torch

from rmsnorm import _buildenv as buildenv
from harness.judging import tolerance as tol
from harness.judging.cases import Case, materialize
from harness.judging.target import LawFailure, NoRoom, Rejected, Target
from harness.judging.laws.common import _fail, _same_bits, compare_forward, compare_grads, inv_for_backward
from harness.judging.laws.registry import law

_TURN_WAIT_S = 60.0


def _gpu_index(dev: torch.device) -> int:
    """The GPU's index: torch.device("cuda"), as a gate loads a target, has none, and torch's per-device
    calls (memory fractions) refuse a device without one."""
    return torch.cuda.current_device() if dev.index is None else dev.index


@contextlib.contextmanager
def _gpu_memory_turn(dev: torch.device):
    """One case of about 17 GiB at a time on a GPU, across every process of the suite on this
    machine (pytest -n K, mutate's judges, a fuzz session beside a gate): without it, two such cases
    at once could find the memory taken and be skipped, or fail to allocate. The memory is handed
    back to the driver before the next process takes its turn."""
    index = _gpu_index(dev)
    with contextlib.ExitStack() as stack:
        try:  # waiting stays well inside the worker's hang limit
            stack.enter_context(buildenv.file_lock(buildenv.work_root() / "locks" / f"gpu{index}-big-cases.lock",
                                                wait_s=_TURN_WAIT_S))
        except TimeoutError:
            raise NoRoom(f"another process held this GPU's turn for big cases over {_TURN_WAIT_S:.0f} s") from None
        try:
            yield
        finally:
            try:
                torch.cuda.synchronize(dev)
                torch.cuda.empty_cache()
            except RuntimeError:
                pass  # a CUDA error the target left behind: the law's own exception says what it was


# What a case past 2^31 elements leaves free on its GPU for the other processes there: the other judges
# of `pytest -n` or of mutate, compute-sanitizer's runs beside a lane's mutate step. Without it the case
# took what it found free, and a sanitizer run beside it died of an out-of-memory error in its own small
# tensors. It stays small: those processes wait for the case to end (a case short of memory runs again,
# harness.running.worker and harness.tools.sanitize), and a quarter of an 80 GB card, tried, left the case
# itself no room beside mutate's judges, so that two mutants only it kills survived.
LEFT_FOR_OTHERS = 8 << 30


@contextlib.contextmanager
def _allocation_cap(dev: torch.device, room: int):
    """This process's caching allocator may hold what it holds now plus `room` bytes, no more, while the
    case runs (torch.cuda.set_per_process_memory_fraction): a target whose allocations would take the
    memory left for the others runs out of memory here instead, in this law, which says so (NoRoom)."""
    index = _gpu_index(dev)
    total = torch.cuda.get_device_properties(index).total_memory
    getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    before = float(getter(index)) if getter is not None else 1.0
    cap = min(before, float(torch.cuda.memory_reserved(index) + room) / total)
    torch.cuda.set_per_process_memory_fraction(cap, index)
    try:
        yield
    finally:
        torch.cuda.set_per_process_memory_fraction(before, index)


@law(cuda=True)
def beyond_2_31_elements(target: Target, case: Case):
    """Tensors past 2^31 elements (64-bit offsets): the rows around the 2^31-element boundary and
    at the end, forward and grad_x, and sampled columns of grad_weight match the reference."""
    with _gpu_memory_turn(target.device):
        free, _ = torch.cuda.mem_get_info(target.device)
        room = free - LEFT_FOR_OTHERS
        try:
            _check_room(case, free, room)
            with _allocation_cap(target.device, room):
                return _beyond_2_31_elements(target, case)
        except (torch.cuda.OutOfMemoryError, Rejected) as e:
            no = no_room(e, free, case)
            if no is None:
                raise
            raise no from None


def no_room(e: Exception, free: int, case: Case) -> "NoRoom | None":
    """A case past 2^31 elements that ran out of GPU memory is not run here (NoRoom), whether the
    law's own tensors (torch's OutOfMemoryError) or the target's allocations (its call's refusal
    naming one) did: a GPU with less free memory, not a fault of the target. None for any other
    exception."""
    text = str(e).strip()
    if not isinstance(e, torch.cuda.OutOfMemoryError) and "OutOfMemoryError" not in text:
        return None
    tensor = case.numel * case.torch_dtype.itemsize / 2**30
    first = text.splitlines()[0][:240] if text else type(e).__name__
    return NoRoom(f"{first} ({free / 2**30:.1f} GiB free before the case, {LEFT_FOR_OTHERS / 2**30:.0f} GiB of it "
                  f"left for the other processes on this GPU; the case's tensors take {tensor:.1f} GiB each)")


def _check_room(case: Case, free: int, room: int) -> None:
    elsize = case.torch_dtype.itemsize
    need = 4 * case.numel * elsize + 8 * case.rows + (1 << 30)
    if room < need:
        raise NoRoom(f"the case needs about {need / 2**30:.1f} GiB of free GPU memory, {free / 2**30:.1f} GiB free, "
                     f"of which {LEFT_FOR_OTHERS / 2**30:.0f} GiB is left for the other processes on this GPU")


def _beyond_2_31_elements(target: Target, case: Case):
    dev = target.device
    dt, wdt = case.torch_dtype, case.torch_weight_dtype
    rows, n = case.rows, case.n
    g = torch.Generator(device=dev).manual_seed(case.seed)
    x = torch.randn(rows, n, generator=g, device=dev, dtype=dt)
    w = torch.randn(n, generator=g, device=dev, dtype=torch.float32).to(wdt)
    boundary = (1 << 31) // n
    pick = torch.tensor(sorted({r for r in (0, boundary - 1, boundary, boundary + 1, rows - 2, rows - 1)
                                if 0 <= r < rows}), device=dev)
    y, inv = target.forward(x, w, case.eps)
    compare_forward(y[pick], None if inv is None else inv.reshape(rows)[pick], x[pick], w, case.eps, case,
                    label="[rows at the 2^31 boundary and the end] ")
    del y
    if not target.has_backward:
        return {}
    dy = torch.randn(rows, n, generator=g, device=dev, dtype=dt)
    inv_b = inv_for_backward(x, case.eps, inv).reshape(rows)
    gx, gw = target.backward(dy, x, w, inv_b.reshape(x.shape[:-1]))
    compare_grads(gx[pick], gw, dy[pick], x[pick], w, case.eps, inv_b[pick], case, weight_grad=False,
                  label="[rows at the 2^31 boundary and the end] ")
    del gx
    # grad_weight on a few columns, summed over every row in float64.
    cols = torch.tensor(sorted({0, n // 2, n - 1}), device=dev)
    ref = torch.zeros(len(cols), dtype=torch.float64, device=dev)
    mag = torch.zeros_like(ref)
    step = max(1, (1 << 26) // n)
    for r0 in range(0, rows, step):
        xs = x[r0:r0 + step].to(torch.float64)
        inv64 = torch.rsqrt((xs * xs).mean(-1) + case.eps)
        t = dy[r0:r0 + step, cols].to(torch.float64) * xs[:, cols] * inv64[:, None]
        ref += t.sum(0)
        mag += t.abs().sum(0)
    got = gw[cols].to(torch.float64)
    u_acc, u_w = tol.unit_roundoff(tol.acc_dtype(dt)), tol.unit_roundoff(wdt)
    bound = tol.SAFETY * ((rows * u_acc + 2 * u_w) * mag + 2 * u_w * ref.abs())
    bad = ~((got - ref).abs() <= bound)
    if bool(bad.any()):
        k = int(bad.nonzero()[0])
        raise LawFailure(f"grad_weight[{int(cols[k])}] over {rows} rows: expected {ref[k].item():.6g} "
                         f"(bound {bound[k].item():.3g}), but got {got[k].item():.6g}\n  case: {case.short()}")
    return {}


@law(cuda=True)
def honours_current_stream(target: Target, case: Case):
    """The target runs on the current CUDA stream: inputs produced by work still running on a
    side stream are read only after that work."""
    t = materialize(case, target.device)
    side = torch.cuda.Stream(device=target.device)
    torch.cuda.synchronize(target.device)
    # x is rebuilt storage and all, so every layout (broadcast rows, gaps between rows) survives.
    src = t.x
    n_store = src.untyped_storage().nbytes() // src.element_size()
    flat = torch.empty(0, dtype=src.dtype, device=src.device).set_(src.untyped_storage(), 0, (n_store,), (1,))
    with torch.cuda.stream(side):
        buf = torch.empty(n_store, dtype=src.dtype, device=target.device)
        buf.fill_(float("nan"))
        torch.cuda._sleep(20_000_000)  # keep the side stream busy before x gets its values
        buf.copy_(flat)
        x = buf.as_strided(src.shape, src.stride(), src.storage_offset())
        y, _ = target.forward(x, t.weight, case.eps)  # a refusal is Rejected, as in every law
    side.synchronize()
    target.sync()
    compare_forward(y, None, t.x, t.weight, case.eps, case, label="[computed on a side stream] ",
                    extra="\n  (the target likely launches on another stream than torch.cuda.current_stream())")
    return {}


@law(ops=True, cuda=True)
def cuda_graph_equals_eager(target: Target, case: Case):
    """Forward and backward captured in a CUDA graph and replayed on new inputs give bitwise the
    eager results."""
    t = materialize(case, target.device)
    x = t.x.clone()
    dy = t.grad_out.clone()
    static_x, static_dy = x.clone(), dy.clone()
    s = torch.cuda.Stream(device=target.device)
    s.wait_stream(torch.cuda.current_stream(target.device))
    with torch.cuda.stream(s):
        for _ in range(2):  # warm up outside the capture
            y, inv = torch.ops.rmsnorm.forward(static_x, t.weight, case.eps)
            torch.ops.rmsnorm.backward(static_dy, static_x, t.weight, inv)
    torch.cuda.current_stream(target.device).wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gy, ginv = torch.ops.rmsnorm.forward(static_x, t.weight, case.eps)
        ggx, ggw = torch.ops.rmsnorm.backward(static_dy, static_x, t.weight, ginv)
    new_x = x * 0.5 + 0.25
    static_x.copy_(new_x)
    g.replay()
    torch.cuda.synchronize(target.device)
    ey, einv = torch.ops.rmsnorm.forward(new_x, t.weight, case.eps)
    egx, egw = torch.ops.rmsnorm.backward(dy, new_x, t.weight, einv)
    msgs = [f"{n}: graph replay differs from eager" for n, a, b in
            (("y", gy, ey), ("inv_rms", ginv, einv), ("grad_x", ggx, egx), ("grad_weight", ggw, egw))
            if not _same_bits(a, b)]
    _fail(msgs, case)
    return {}

