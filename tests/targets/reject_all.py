"""Rejects every input: must not look green."""

import os


def forward(x, weight, eps):
    # The environment variables let the worker tests see which environment a worker runs in.
    note = "; ".join(v for v in (os.environ.get("RMSNORM_REJECT_WITH"), os.environ.get("RMSNORM_REJECT_NOTE")) if v)
    raise NotImplementedError(f"this target supports nothing (got {x.dtype}){': ' + note if note else ''}")
