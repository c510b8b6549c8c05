"""Where a memory-mapped array lives: the mapping its memory lies in and its place in its file.

``np.memmap`` (what ``np.load(..., mmap_mode="r")`` returns) says which file it maps
(``filename``) and where its mapping starts in it (``offset``, of the array the map was made
for; views keep it); its memory lies in an ``mmap.mmap`` found by following ``base``. These
two functions are the one place that reads them: the planned direct reads of
:mod:`shoal.rows` and the page-dropping helpers of :mod:`shoal.utils.io` recognise a
file-backed array through them (no private attribute of numpy).
"""

from __future__ import annotations

import mmap
import os
from typing import NamedTuple

import numpy as np

__all__ = ["read_span", "FilePlace", "file_of", "mapping_of"]


class FilePlace(NamedTuple):
    """Where an array is in its file: ``path``, the byte ``offset`` of its first element and
    the ``stride`` in bytes between consecutive rows (along axis 0; the item size of a 0-D
    array)."""

    path: str
    offset: int
    stride: int


def mapping_of(a: np.ndarray) -> mmap.mmap | None:
    """The memory map whose memory ``a`` lies in (``a``'s ``base`` chain), or None."""
    base = a
    while isinstance(base, np.ndarray):
        base = base.base
    return base if isinstance(base, mmap.mmap) else None


def file_of(a: np.ndarray) -> FilePlace | None:
    """Where the memory-mapped array ``a`` (an ``np.memmap``, or a view of one that numpy keeps
    as one: slices, reshapes) lies in its file, or None for an in-memory array. The layout
    of the rows (contiguous columns, strides) is the caller's to check."""
    if not isinstance(a, np.memmap) or not a.filename or a.offset is None:
        return None
    mm = mapping_of(a)
    if mm is None:
        return None
    map_start = int(a.offset) - int(a.offset) % mmap.ALLOCATIONGRANULARITY
    map_addr = np.frombuffer(mm, dtype=np.uint8).ctypes.data
    stride = int(a.strides[0]) if a.ndim else int(a.itemsize)
    return FilePlace(str(a.filename), map_start + (a.ctypes.data - map_addr), stride)


def read_span(a: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``a[lo:hi]`` of a 1-D array as an in-memory copy. A memory-mapped ``a`` is read with
    positioned reads (``pread``) whose pages are then dropped from the page cache, never
    through page faults of the map: a pass over a file larger than memory does not grow the
    process (mapped pages count against a memory cgroup and are slow to reclaim)."""
    place = file_of(a)
    lo, hi = int(lo), int(hi)
    if place is None or a.ndim != 1 or place.stride != a.itemsize:
        return np.array(a[lo:hi])
    out = np.empty(max(hi - lo, 0), dtype=a.dtype)
    if hi <= lo:
        return out
    view = memoryview(out.view(np.uint8))
    start = place.offset + lo * a.itemsize
    fd = os.open(place.path, os.O_RDONLY)
    try:
        done = 0
        while done < len(view):
            k = os.preadv(fd, [view[done:]], start + done)
            if k <= 0:
                raise OSError(f"{place.path}: file ends before entry {hi} (truncated?)")
            done += k
        os.posix_fadvise(fd, start, len(view), os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return out
