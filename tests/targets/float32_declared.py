"""Correct and float32 only, and it says so: RMSNORM_CONTRACT declares float32, so the gate draws
float32 cases only and holds the target to them."""

from tests.targets.float32_only import backward, forward  # noqa: F401

RMSNORM_CONTRACT = {"dtypes": ["float32"]}
