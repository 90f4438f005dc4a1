"""Process-wide CPU settings shared by every entry point: torch threads, and glibc's allocator.

Why the allocator: a loss over a 49k-150k vocabulary allocates several (tokens x vocab) float32 buffers per chunk,
200 MB each at 1024 tokens. glibc serves blocks that large with mmap and unmaps them on free, so every new buffer
is fresh memory that the kernel zero-fills page by page; on a small CPU that can cost more than the arithmetic
(scripts/bench_train_step.py measures it).
`keep_freed_memory` tells glibc to serve big blocks from its heap and not to give freed memory back, which is
what jemalloc/tcmalloc (the usual LD_PRELOAD advice for CPU training) do too. The price: the process keeps its
peak memory until it exits. It changes nothing on GPUs (CUDA has its own caching allocator) and is skipped where
the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import logging
import sys

import torch

log = logging.getLogger(__name__)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # mallopt parameters, from glibc's malloc.h
_kept = False


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory for reuse (no mmap for big blocks, no trimming). True when it took."""
    global _kept
    if _kept:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # musl or another C library: leave it alone
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _kept = mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, -1) == 1  # -1: never trim (man mallopt)
    if not _kept:
        log.warning("glibc refused mallopt: freed memory is returned to the OS (slower losses on CPU).")
    return _kept


def peak_rss_gb() -> float:
    """This process's peak resident memory so far, in GB (Linux and macOS report it in different units)."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024**3 if sys.platform == "darwin" else 1024**2)


def setup_cpu(threads: int | None = None, keep_memory: bool = True) -> None:
    """`threads` torch CPU threads (None: torch's default, all cores) and, with `keep_memory`, keep_freed_memory()."""
    if threads:
        torch.set_num_threads(int(threads))
    if keep_memory:
        keep_freed_memory()
