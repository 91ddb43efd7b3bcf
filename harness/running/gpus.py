"""Spreading independent processes over the GPUs of a host: each process that runs a target on
CUDA, with several GPUs visible and no assignment of its own (CUDA_VISIBLE_DEVICES, an xdist
worker id), claims the GPU the fewest live processes hold. Claims are files named by GPU and
pid in one directory, taken under a file lock; a dead process's claims are dropped by the next
claimant. This is how HypoFuzz's `hypothesis fuzz -n K` (or any K runs of the suite side by
side) lands on K GPUs, not all on GPU 0."""

from __future__ import annotations

import atexit
import fcntl
import os
import re
from collections import Counter
from pathlib import Path
from harness.running.locations import work_root

CLAIMS_ENV = "RMSNORM_GPU_CLAIMS"  # the claims directory (default: gpu-claims in the work root)


def claims_dir() -> Path:
    return Path(os.environ.get(CLAIMS_ENV) or work_root() / "gpu-claims")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(count: int) -> int:
    """The index (0 .. count-1) of the GPU the fewest live processes have claimed, now claimed by
    this process until it exits."""
    if count < 1:
        raise ValueError(f"gpus.claim: expected at least one GPU, but got {count}")
    d = claims_dir()
    d.mkdir(parents=True, exist_ok=True)
    with open(d / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        live: Counter = Counter()
        for f in d.glob("gpu*-pid*"):
            m = re.fullmatch(r"gpu(\d+)-pid(\d+)", f.name)
            if not m:
                continue
            if _alive(int(m.group(2))):
                live[int(m.group(1))] += 1
            else:
                f.unlink(missing_ok=True)
        gpu = min(range(count), key=lambda g: (live[g], g))
        mine = d / f"gpu{gpu}-pid{os.getpid()}"
        mine.touch()
    atexit.register(lambda: mine.unlink(missing_ok=True))
    return gpu


PER_GPU_MAX = 4  # processes a GPU, at most
CORES_PER_PROCESS = 2  # a process judging a target keeps about two cores busy (its driver and its worker)


def default_processes(device: str, *, cores: int | None = None, gpus: int | None = None) -> int:
    """How many processes judge side by side by default (fuzz --workers, gate -n): on CUDA several
    a GPU, as the cores allow (a process is bound by its host side: a campaign of one process a GPU
    kept each H200 0-13% busy), at most PER_GPU_MAX a GPU; on the CPU one per four cores."""
    cores = cores if cores is not None else (os.cpu_count() or 1)
    if device == "cuda":
        if gpus is None:
            import torch  # only on CUDA: this module serves light callers (the command line's defaults)

            gpus = torch.cuda.device_count()
        gpus = max(1, gpus)
        per_gpu = max(1, min(PER_GPU_MAX, cores // (CORES_PER_PROCESS * gpus)))
        return gpus * per_gpu
    return max(1, cores // 4)
