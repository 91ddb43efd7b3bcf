"""The outputs of this build (the kernels' settings in RMSNORM_KERNEL_DEFINES) on fixed inputs, forward (y,
inv_rms) and backward (grad_x, grad_weight): saved to a file, or compared bit for bit with a file another build
saved. Two settings that lay a row out alike must give the same y, inv_rms and grad_x (the row's sum is added in
an order the layout fixes); grad_weight's bits also follow how many units the backward's grid has. Where they
differ, the largest difference in units of the last place is shown. CUDA only.

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


NAMES = ("y", "inv_rms", "grad_x", "grad_weight")


def outputs() -> dict[str, tuple[torch.Tensor, ...]]:
    from harness import ops

    ops.extension()
    out = {}
    for dtype, n, rows in CASES:
        g = torch.Generator(device="cuda").manual_seed(n * 31 + rows)
        x = torch.randn(rows, n, device="cuda", generator=g).to(dtype)
        w = (1 + 0.5 * torch.randn(n, device="cuda", generator=g)).to(dtype)
        dy = torch.randn(rows, n, device="cuda", generator=g).to(dtype)
        y, inv = torch.ops.rmsnorm.forward(x, w, EPS)
        gx, gw = torch.ops.rmsnorm.backward(dy, x, w, inv)
        out[f"{str(dtype).removeprefix('torch.')} {rows} x {n}"] = tuple(t.cpu() for t in (y, inv, gx, gw))
    return out


def ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    """The largest difference of a and b in units of the last place of their dtype (same-sign values)."""
    bits = {2: torch.int16, 4: torch.int32}[a.element_size()]
    return int((a.view(bits).to(torch.int64) - b.view(bits).to(torch.int64)).abs().max())


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


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
    differ = {name: 0 for name in NAMES}
    print("| case | " + " | ".join(NAMES) + " |")
    print("|---|" + "---|" * len(NAMES))
    for key, mine_t in mine.items():
        cells = []
        for name, a, b in zip(NAMES, mine_t, theirs[key]):
            if same(a, b):
                cells.append("same")
            else:
                differ[name] += 1
                cells.append(f"{ulps(a, b)} ulp")
        print(f"| {key} | " + " | ".join(cells) + " |")
    print("same_bits: cases bit for bit the same, of " + str(len(mine)) + ": " +
          ", ".join(f"{name} {len(mine) - d}" for name, d in differ.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
