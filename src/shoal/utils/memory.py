"""Peak resident memory of this process (for benchmarks and ``--json`` outputs)."""

from __future__ import annotations

import ctypes
import ctypes.util
import resource
import sys

__all__ = ["peak_rss_bytes", "return_freed_memory", "trim_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def return_freed_memory(threshold: int = 8 << 20) -> bool:
    """Make glibc's allocator give large freed blocks back to the system (``mallopt``).

    By default glibc raises its mmap threshold each time a large block is freed (up to
    32 MiB), after which blocks of that size come from the heap and stay with the process when
    freed: buffers of a few MiB allocated and freed batch after batch then add hundreds of MiB
    to the resident set (docs/measurements.md#the-memory-plan). Fixing
    the mmap and trim thresholds at ``threshold`` bytes keeps a memory budget honest. Returns
    false where there is no glibc (the call is then a no-op)."""
    name = ctypes.util.find_library("c")
    if not name or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(name)
        ok = libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)) == 1
        return bool(libc.mallopt(_M_TRIM_THRESHOLD, int(threshold)) == 1 and ok)
    except (OSError, AttributeError):
        return False


def trim_freed_memory() -> bool:
    """Give every whole free page of glibc's heaps back to the system now (``malloc_trim(0)``:
    blocks freed below the trim threshold, or in the middle of a heap, otherwise stay
    resident), so that memory just released is free for others and a footprint measured next
    sees it gone. Returns false where there is no glibc (a no-op)."""
    name = ctypes.util.find_library("c")
    if not name or not sys.platform.startswith("linux"):
        return False
    try:
        ctypes.CDLL(name).malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


def peak_rss_bytes() -> int:
    """Peak RSS of the current process in bytes (``ru_maxrss``)."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)
