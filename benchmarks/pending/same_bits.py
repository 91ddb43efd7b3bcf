"""The forward's outputs of this build (the kernels' settings in RMSNORM_KERNEL_DEFINES) on fixed inputs: saved
to a file, or compared bit for bit with a file another build saved. Two settings that lay a row out alike must
give the same bits (the sum's order is fixed by the layout); where they differ, the largest difference of y in
units of the element's last place is shown. CUDA only.

    RMSNORM_KERNEL_DEFINES= python3 benchmarks/pending/same_bits.py save .build/base.pt
    RMSNORM_KERNEL_DEFINES=RMSNORM_FWD_GLOBAL_FROM=2048 python3 benchmarks/pending/same_bits.py compare .build/base.pt
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# (dtype, N, rows): the staged forward's lengths, a whole slab more or less, and a row that ends inside a slab.
CASES = [(dtype, n, rows) for dtype in (torch.bfloat16, torch.float32, torch.float16)
         for n, rows in ((16384, 33), (16384 + 8, 7), (65536, 9), (131072, 5), (262144 - 8, 3), (262144, 17))]
EPS = 1e-5


def outputs() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    from harness import ops

    ops.extension()
    out = {}
    for dtype, n, rows in CASES:
        g = torch.Generator(device="cuda").manual_seed(n * 31 + rows)
        x = torch.randn(rows, n, device="cuda", generator=g).to(dtype)
        w = (1 + 0.5 * torch.randn(n, device="cuda", generator=g)).to(dtype)
        y, inv = torch.ops.rmsnorm.forward(x, w, EPS)
        out[f"{str(dtype).removeprefix('torch.')} {rows} x {n}"] = (y.cpu(), inv.cpu())
    return out


def ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    """The largest difference of a and b in units of the last place of their dtype (same-sign values)."""
    bits = {2: torch.int16, 4: torch.int32}[a.element_size()]
    return int((a.view(bits).to(torch.int64) - b.view(bits).to(torch.int64)).abs().max())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("save", "compare"))
    p.add_argument("file")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("same_bits: needs a CUDA GPU")
    mine = outputs()
    if args.action == "save":
        torch.save(mine, args.file)
        print(f"same_bits: {len(mine)} cases saved to {args.file}")
        return 0
    theirs = torch.load(args.file)
    differ = 0
    for key, (y, inv) in mine.items():
        ty, tinv = theirs[key]
        same = torch.equal(y.view(torch.uint8), ty.view(torch.uint8)) and torch.equal(inv.view(torch.uint8),
                                                                                     tinv.view(torch.uint8))
        differ += not same
        verdict = "same bits" if same else f"differ: y by up to {ulps(y, ty)} ulp, inv_rms by {ulps(inv, tinv)}"
        print(f"| {key} | {verdict} |")
    print(f"same_bits: {len(mine) - differ} of {len(mine)} cases bit for bit the same")
    return 0


if __name__ == "__main__":
    sys.exit(main())
