"""Broken: for rows of 257 to 512 elements in 16 bits, each pair of rows shares one sum of squares (a
reduction that walks two rows as one), so an inf or NaN in one row turns its partner's outputs NaN too. Every
output element is written: the report must say the NaN spread from the partner row, never that the memory
was never written."""

import torch

from tests.targets import correct_torch

backward = correct_torch.backward


def forward(x, weight, eps):
    n = x.shape[-1]
    if x.dtype in (torch.float16, torch.bfloat16) and 257 <= n <= 512 and x.numel() // n >= 2:
        rows = x.reshape(-1, n).to(torch.float32)
        ms = rows.pow(2).mean(-1, keepdim=True)
        paired = ms.clone()
        k = (rows.shape[0] // 2) * 2
        paired[:k] = (ms[:k].reshape(-1, 2, 1).mean(1, keepdim=True)).expand(-1, 2, 1).reshape(k, 1)
        inv = torch.rsqrt(paired + eps)
        y = ((rows * inv).to(x.dtype).to(torch.float32) * weight.to(torch.float32)).to(x.dtype)
        return y.reshape(x.shape), inv.reshape(x.shape[:-1])
    return correct_torch.forward(x, weight, eps)
