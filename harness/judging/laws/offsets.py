"""64-bit row offsets on the CPU: rows that start past 2^31 elements from x's first, in a storage that is
never touched but for them.

On a GPU, beyond_2_31_elements judges tensors past 2^31 elements (4 GiB and more, written whole). On the
CPU lane nothing else reaches offsets that large: its cases hold at most 2^24 elements. A kernel that
keeps a row index in int32 computes row * row_stride in int32 and wraps once a row starts 2^31 elements
or more past x's first (a Triton kernel that leaves tl.program_id(0) as it is, say). Here three rows sit
at a row stride of 2^30 elements; row 2 starts 2^31 elements past x's first, so a wrapped offset lands
2^31 elements before x, which is still inside the storage (x starts 2^31 elements into it) and holds
NaN there. The storage (2^32 + 2N elements: 8 GiB of a 16-bit dtype) is allocated and never written but
for the rows and the NaN: Linux faults in only the pages that are touched, so it costs no memory.
"""

from __future__ import annotations

import torch

from harness.judging.cases import Case
from harness.judging.laws.common import compare_forward, compare_grads, inv_for_backward
from harness.judging.laws.registry import law
from harness.judging.target import Target

ROW_STRIDE = 1 << 30  # elements from one row's first to the next's: below 2^31, so int32 holds the stride
START = 1 << 31  # x's first element, into its storage: where an offset wrapped by 2^32 still lands inside
ROWS = 3  # row 2 starts at 2 x 2^30 = 2^31 elements past x's first: the first past int32


def far_rows(case: Case, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x, grad_out, weight) of case: x and grad_out rows of case.n elements at a row stride of 2^30, in one
    storage of 2^32 + 2N elements that is not written but for them; where a row offset wrapped to int32
    would land (the storage's first 2N elements), NaN."""
    n, dt = case.n, case.torch_dtype
    gen = torch.Generator().manual_seed(case.seed)
    store = torch.empty(START + (ROWS - 1) * ROW_STRIDE + 2 * n, dtype=dt, device=device)
    store[: 2 * n].fill_(float("nan"))
    x = store.as_strided((ROWS, n), (ROW_STRIDE, 1), storage_offset=START)
    grad_out = store.as_strided((ROWS, n), (ROW_STRIDE, 1), storage_offset=START + n)
    scale = torch.exp(torch.randn(ROWS, 1, generator=gen, dtype=torch.float64))
    x.copy_((torch.randn(ROWS, n, generator=gen, dtype=torch.float64) * scale).to(dt))
    grad_out.copy_(torch.randn(ROWS, n, generator=gen, dtype=torch.float64).to(dt))
    weight = torch.randn(n, generator=gen, dtype=torch.float64).to(case.torch_weight_dtype).to(device)
    return x, grad_out, weight


@law(cpu=True)
def row_offsets_past_2_31(target: Target, case: Case):
    """Rows that start past 2^31 elements from x's first (3 rows at a row stride of 2^30, in a storage
    never touched but for them): forward, and backward with grad_out so placed too, match the reference."""
    x, grad_out, weight = far_rows(case, target.device)
    # The layout, not a cause: a target wrong on every row here (its eps, say) is wrong for its own reasons.
    label = "[rows 2^30 elements apart; row 2 starts 2^31 elements past x's first] "
    y, inv = target.forward(x, weight, case.eps)
    facts = compare_forward(y, inv, x, weight, case.eps, case, label=label)
    if target.has_backward:
        inv_b = inv_for_backward(x, case.eps, inv)
        gx, gw = target.backward(grad_out, x, weight, inv_b)
        compare_grads(gx, gw, grad_out, x, weight, case.eps, inv_b, case, label=label)
    return facts
