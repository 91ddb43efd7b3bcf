"""Rejects every input: must not look green."""


def forward(x, weight, eps):
    raise NotImplementedError(f"this target supports nothing (got {x.dtype})")
