"""Process memory: peak resident memory (for benchmarks and ``--json`` outputs), giving freed
memory back, and large arrays on huge pages."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import resource
import sys

import numpy as np

__all__ = [
    "huge_empty",
    "huge_zeros",
    "keep_freed_memory",
    "peak_rss_bytes",
    "return_freed_memory",
    "trim_freed_memory",
]

#: arrays at least this large (default 64 MiB) ask for transparent huge pages
HUGE_MIN_BYTES = 64 << 20

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
#: glibc's default top pad (``DEFAULT_TOP_PAD``)
DEFAULT_TOP_PAD = 128 << 10
#: the largest mmap threshold glibc accepts on 64-bit systems (``HEAP_MAX_SIZE / 2``)
MAX_MMAP_THRESHOLD = 32 << 20


def return_freed_memory(threshold: int = 8 << 20) -> bool:
    """Make glibc's allocator give large freed blocks back to the system (``mallopt``).

    By default glibc raises its mmap threshold each time a large block is freed (up to
    32 MiB), after which blocks of that size come from the heap and stay with the process when
    freed: buffers of a few MiB allocated and freed batch after batch then add hundreds of MiB
    to the resident set (docs/measurements.md#the-memory-plan). Fixing
    the mmap and trim thresholds at ``threshold`` bytes keeps a memory budget honest. Returns
    false where there is no glibc (the call is then a no-op)."""
    t = int(threshold)
    return _set_thresholds(mmap=t, trim=t, top_pad=DEFAULT_TOP_PAD)


def keep_freed_memory(nbytes: int) -> bool:
    """Let glibc's heap keep up to ``nbytes`` (at least 8 MiB) of freed memory for the next
    allocations instead of returning it at once (``mallopt``: top pad and trim threshold
    ``nbytes``, mmap threshold ``min(nbytes, 32 MiB)``): a training step's tensors, freed at the
    end of one step and allocated again in the next, then reuse the same pages instead of
    mapping and page-faulting them in afresh every step. Give it memory the budget already
    counts (a step's activations) and undo it with :func:`return_freed_memory` before that
    memory is used otherwise. Returns false where there is no glibc (a no-op)."""
    n = max(int(nbytes), 8 << 20)
    return _set_thresholds(mmap=min(n, MAX_MMAP_THRESHOLD), trim=n, top_pad=n)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """glibc, or None elsewhere (looked up once: ``find_library`` runs ``ldconfig -p``, a
    fork of this process, on every call)."""
    name = ctypes.util.find_library("c")
    if not name or not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def _set_thresholds(*, mmap: int, trim: int, top_pad: int) -> bool:
    """glibc's mmap threshold, trim threshold and top pad (bytes); false without glibc."""
    libc = _libc()
    if libc is None:
        return False
    try:
        ok = libc.mallopt(_M_MMAP_THRESHOLD, mmap) == 1
        ok = libc.mallopt(_M_TRIM_THRESHOLD, trim) == 1 and ok
        return bool(libc.mallopt(_M_TOP_PAD, top_pad) == 1 and ok)
    except AttributeError:
        return False


def trim_freed_memory() -> bool:
    """Give every whole free page of glibc's heaps back to the system now (``malloc_trim(0)``:
    blocks freed below the trim threshold, or in the middle of a heap, otherwise stay
    resident), so that memory just released is free for others and a footprint measured next
    sees it gone. Returns false where there is no glibc (a no-op)."""
    libc = _libc()
    if libc is None:
        return False
    try:
        libc.malloc_trim(0)
        return True
    except AttributeError:
        return False


def peak_rss_bytes() -> int:
    """Peak RSS of the current process in bytes (``ru_maxrss``)."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)


def huge_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """``np.empty(shape, dtype)``, on transparent huge pages when it is at least
    :data:`HUGE_MIN_BYTES` and the kernel offers them (``madvise(MADV_HUGEPAGE)``: kernels
    whose THP setting is ``madvise``, the common default, give them only when asked).

    An array read at random rows (a feature cache: an epoch's gathers, an evaluation's
    in-neighbours) on 4 KiB pages misses the TLB on almost every row, and each miss walks the
    page tables; on 2 MiB pages one entry covers 512 times the memory
    (docs/measurements.md#pulling-rows-held-in-memory). The memory is an anonymous map of
    its own, returned to the system when the array goes."""
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if nbytes < HUGE_MIN_BYTES or not hasattr(mmap, "MADV_HUGEPAGE"):
        return np.empty(shape, dt)
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        buf.madvise(mmap.MADV_HUGEPAGE)
    except OSError:  # THP compiled out or disabled: ordinary pages
        pass
    return np.frombuffer(buf, dt).reshape(shape)


def huge_zeros(shape: tuple[int, ...], dtype) -> np.ndarray:
    """``np.zeros(shape, dtype)`` as :func:`huge_empty` (an anonymous map is zero already):
    an accumulator written at every row faults it in 2 MiB at a time, not 4 KiB (on this
    project's virtual machines a 4 KiB fault of fresh memory costs far more than zeroing it:
    docs/measurements.md#pulling-rows-held-in-memory)."""
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if nbytes < HUGE_MIN_BYTES or not hasattr(mmap, "MADV_HUGEPAGE"):
        return np.zeros(shape, dt)
    return huge_empty(shape, dt)
