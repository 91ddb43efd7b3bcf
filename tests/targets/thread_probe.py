"""Correct (tests/targets/correct_torch.py), except that it refuses to run unless torch uses the
number of CPU threads named in RMSNORM_EXPECT_THREADS: a probe of the worker's thread share."""

import os

import torch

from tests.targets import correct_torch


def forward(x, weight, eps):
    want = int(os.environ["RMSNORM_EXPECT_THREADS"])
    if torch.get_num_threads() != want:
        raise RuntimeError(f"expected {want} torch threads, but the worker has {torch.get_num_threads()}")
    return correct_torch.forward(x, weight, eps)


backward = correct_torch.backward
