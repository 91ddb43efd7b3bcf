"""The worker processes' C heap: freed memory kept for the next tensor instead of handed back to
the system at every free; and the objects made on import frozen out of the garbage collector's walks.

glibc serves every block over 32 MB with mmap and returns it with munmap when it is freed, so each
float64 temporary of a large case (128 MB at 2^24 elements, a dozen of them a law) has its pages
faulted in and zeroed by the kernel afresh. Three backward_matches_reference cases of 2^24
elements took 47 s on one core of the 2-core CI machine, 30 s of it in the kernel; served from the
heap, keeping up to 1 GiB freed, 20 s (3.5 s in the kernel), the process' peak memory 3.3 GB
instead of 2.5 GB. What a worker keeps is what its largest case needed, as a caching allocator
would keep it; workers end with their run.
"""

from __future__ import annotations

import ctypes
import gc

# mallopt's parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_MAX = -4

KEEP_BYTES = 1 << 30  # freed memory kept at the top of the heap; what is beyond goes back to the system
TOP_PAD_BYTES = 64 << 20  # each time the heap grows, by at least this much


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to serve large blocks from the heap and keep up to KEEP_BYTES of freed
    memory at its top. False where there is no mallopt (not glibc): nothing changes there."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library already loaded into this process
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0) and mallopt(_M_TRIM_THRESHOLD, KEEP_BYTES)
                and mallopt(_M_TOP_PAD, TOP_PAD_BYTES))


def freeze_imported_objects() -> None:
    """What torch and the harness created on import is never garbage: moved out of the collector's
    sight (gc.freeze), the full collections no longer walk those objects again. A CPU gate's own
    process took 6.3 s of CPU instead of 7.1-7.8 s; a worker forked from a fork server that froze them
    spent 1.0 s in collections instead of 1.35 s."""
    gc.collect()
    gc.freeze()
