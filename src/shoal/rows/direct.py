"""Planned reads of rows of a file-backed ``(N, F)`` array: sorted, coalesced, direct.

A :class:`RowReader` takes a whole *set* of rows at once (Ginex, Park et al., VLDB 2022, Sec. 4:
the rows of a window of batches are known before they are used), sorts them, widens each to
whole pages, merges extents within ``merge_gap`` bytes of each other into one run, and reads
each run with one ``pread`` into a page-aligned staging buffer opened with ``O_DIRECT`` (no page
cache, nothing charged to the process's memory), several runs at once from ``threads`` threads:
a dense set becomes a sequential sweep, a sparse one a batch of parallel small reads (DGL
GraphBolt's ``DiskBasedFeature`` makes the same choice). One random request costs about as much
as a few tens of KiB of sequential transfer, hence the default ``merge_gap`` of 32 KiB
(docs/measurements.md#reading-rows-from-disk; ``python bench/disk.py`` measures a disk). Also
here: the rows' file layout (:class:`RowFile`) and :func:`load_array`.
"""

from __future__ import annotations

import mmap
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from shoal.rows import _kernels as K
from shoal.rows.source import FileShape, ReadStats, check_read
from shoal.utils.featdtype import scales_of
from shoal.utils.mapped import file_of

__all__ = [
    "MAX_RUN",
    "MERGE_GAP",
    "PAGE",
    "RowFile",
    "RowReader",
    "aligned_empty",
    "load_array",
    "read_file_into",
]

PAGE = 4096
#: extents closer than this are read as one run (default 32 KiB; see the module docstring).
MERGE_GAP = 32 << 10
#: the longest single read and the size of each thread's staging buffer (default 4 MiB).
MAX_RUN = 4 << 20


@dataclass(frozen=True)
class RowFile:
    """Where the rows of a 2-D array live in a file: row ``v`` is ``row_bytes`` bytes at
    ``offset + v * stride``; int8 rows carry their per-row float32 ``scales`` (in memory or
    mapped: 4 bytes a row, read with the row ids, never in a cache or window)."""

    path: str
    offset: int
    stride: int
    row_bytes: int
    num_rows: int
    dim: int
    dtype: np.dtype
    scales: np.ndarray | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, arr: np.ndarray) -> RowFile | None:
        """The file layout of a memory-mapped 2-D array whose rows are contiguous in its file
        (an ``np.load(..., mmap_mode="r")`` array), or None (in memory, or strided columns)."""
        if arr.ndim != 2:
            return None
        if arr.strides[1] != arr.itemsize or arr.strides[0] < arr.shape[1] * arr.itemsize:
            return None
        place = file_of(arr)
        if place is None:
            return None
        return cls(
            path=place.path,
            offset=place.offset,
            stride=place.stride,
            row_bytes=int(arr.shape[1] * arr.itemsize),
            num_rows=int(arr.shape[0]),
            dim=int(arr.shape[1]),
            dtype=arr.dtype,
            scales=_loaded(scales_of(arr)),
        )


def _loaded(scales: np.ndarray | None) -> np.ndarray | None:
    """Scales in memory (4 bytes a row: read once, not page by page as rows are gathered)."""
    return None if scales is None else np.ascontiguousarray(scales, dtype=np.float32)


def _aligned(nbytes: int) -> np.ndarray:
    """A page-aligned uint8 buffer (a private anonymous memory map: counted in the process's
    ``RssAnon``, unlike the shared one ``mmap.mmap(-1, n)`` makes), as ``O_DIRECT`` needs."""
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    return np.frombuffer(mmap.mmap(-1, max(PAGE, nbytes), flags=flags), dtype=np.uint8)


class RowReader(FileShape):
    """Reads sets of rows of a :class:`RowFile` with planned, coalesced, direct reads.

    Args:
        rows: the file layout (:meth:`RowFile.of`).
        threads: concurrent read requests (default 8; the disk, not the CPU, is the limit).
        merge_gap: join extents at most this many bytes apart (default :data:`MERGE_GAP`).
        direct: open with ``O_DIRECT`` (default true; falls back to buffered reads, with
            ``POSIX_FADV_RANDOM``, where the file system refuses it).

    :meth:`read` is thread-safe; each call uses ``threads`` staging buffers of
    :data:`MAX_RUN` bytes (``threads * 4 MiB`` while it runs).
    """

    def __init__(
        self, rows: RowFile, *, threads: int = 8, merge_gap: int = MERGE_GAP, direct: bool = True
    ) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        if merge_gap < 0:
            raise ValueError(f"merge_gap must be >= 0, got {merge_gap}")
        self.file = rows
        self.threads = threads
        self.merge_gap = int(merge_gap)
        self.stats = ReadStats()
        self._lock = threading.Lock()
        self._fd, self.direct = self._open(direct)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="shoal-read")
        self._staging = threading.local()  # one staging buffer per pool thread, kept

    def _open(self, direct: bool) -> tuple[int, bool]:
        flag = getattr(os, "O_DIRECT", 0)
        if direct and flag:
            try:
                fd = os.open(self.file.path, os.O_RDONLY | flag)
            except OSError:
                fd = -1
            if fd >= 0:
                try:
                    os.preadv(fd, [memoryview(_aligned(PAGE))], 0)  # EINVAL if unsupported
                    return fd, True
                except OSError:
                    os.close(fd)
        fd = os.open(self.file.path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        return fd, False

    def read(
        self,
        ids: np.ndarray,
        out: np.ndarray,
        dest: np.ndarray | None = None,
        out2: np.ndarray | None = None,
    ) -> int:
        """Row ``ids[i]`` into ``out[dest[i]]`` (default ``out[i]``); returns bytes read.
        With ``out2``, a negative ``dest[i]`` sends the row to ``out2[-1 - dest[i]]`` instead
        (two arrays filled by one pass).

        ``ids`` must be sorted and unique (``np.unique``); ``out`` a C-contiguous array of the
        file's dtype with ``dim`` columns. Raises OSError when the file is shorter than a row.
        """
        f = self.file
        ids, dest = check_read(ids, out, dest, out2, num_rows=f.num_rows, dim=f.dim, dtype=f.dtype)
        n = len(ids)
        if n == 0:
            return 0
        start = np.empty(n, np.int64)
        end = np.empty(n, np.int64)
        ptr = np.empty(n + 1, np.int64)
        gap = self.merge_gap
        nr = K._plan_runs(ids, f.offset, f.stride, f.row_bytes, PAGE, gap, MAX_RUN, start, end, ptr)
        flat = out.reshape(-1).view(np.uint8)
        flat2 = flat if out2 is None else out2.reshape(-1).view(np.uint8)
        # contiguous slices of runs of about equal bytes, a few per thread
        cum = np.cumsum(end[:nr] - start[:nr])
        pieces = min(nr, self.threads * 4)
        cuts = np.searchsorted(cum, np.linspace(0, cum[-1], pieces + 1)[1:-1], side="left")
        bounds = np.unique(np.concatenate([[0], cuts + 1, [nr]]).clip(0, nr))
        tasks = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
        need = max(int((end[:nr] - start[:nr]).max()), MAX_RUN)
        staging = self._staging
        runs, layout = (start, end, ptr), (f.offset, f.stride, f.row_bytes)

        def work(span: tuple[int, int]) -> int:
            buf = getattr(staging, "buf", None)
            if buf is None or buf.shape[0] < need:
                buf = staging.buf = _aligned(need)
            a, b = span
            return K._read_runs(self._fd, runs, a, b, ids, dest, layout, buf, flat, flat2)

        got = list(self._pool.map(work, tasks))
        bad = [g for g in got if g < 0]
        if bad:
            r = -1 - bad[0]
            raise OSError(f"{f.path}: file ends before row {int(ids[ptr[r + 1] - 1])} (truncated?)")
        total = int(sum(got))
        with self._lock:
            self.stats.add(n, total, nr)
        return total

    def close(self, *, wait: bool = True) -> None:
        """Stop the reading threads (``wait``: until they have ended) and close the file."""
        self._pool.shutdown(wait=wait)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:  # pragma: no cover - best effort
        # no waiting here: a finalizer runs wherever the garbage collector happens to run,
        # maybe in a thread that holds a lock the ending threads need. No read is under way
        # (a read holds a reference), so the idle threads just end when they wake.
        try:
            self.close(wait=False)
        except Exception:
            pass


def aligned_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a page (:func:`_aligned`), so
    that :func:`read_file_into` can read into it without a staging copy."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    return _aligned(count * dtype.itemsize)[: count * dtype.itemsize].view(dtype).reshape(shape)


def read_file_into(path: str | os.PathLike, out: np.ndarray, *, chunk: int = 8 << 20) -> int | None:
    """The first ``out.nbytes`` bytes of the file ``path`` into ``out`` with ``O_DIRECT``
    reads of ``chunk`` bytes straight into it, in order (one thread: this disk streams at
    its full rate from one queue of large direct reads), the last partial page through a
    one-page buffer; returns the bytes read (whole pages), or None when ``out`` is not a
    page-aligned C-contiguous array (:func:`aligned_empty`) or the file system refuses
    ``O_DIRECT``: the caller reads otherwise. A staging buffer per read costs a copy of every
    byte, and that copy, not the read, is what slows the training beside it
    (docs/measurements.md#reading-packs-without-a-copy). Raises OSError when the file is
    shorter than ``out``."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag or not out.flags.c_contiguous or out.nbytes == 0:
        return None
    flat = out.reshape(-1).view(np.uint8)
    if flat.ctypes.data % PAGE:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | flag)
    except OSError:
        return None
    n = flat.shape[0]
    head = n // PAGE * PAGE
    step = max(PAGE, chunk // PAGE * PAGE)
    pos = 0
    try:
        while pos < head:
            try:
                k = os.preadv(fd, [memoryview(flat[pos : min(pos + step, head)])], pos)
            except OSError:
                if pos == 0:  # direct reads refused here: the caller reads otherwise
                    return None
                raise
            if k <= 0:
                raise OSError(f"{path}: file ends after {pos} of {n} bytes")
            pos += k
        if head < n:
            page = _aligned(PAGE)
            k = os.preadv(fd, [memoryview(page)], head)
            if k < n - head:
                raise OSError(f"{path}: file ends after {head + max(k, 0)} of {n} bytes")
            flat[head:] = page[: n - head]
            pos += PAGE
    finally:
        os.close(fd)
    return pos


def load_array(arr: np.ndarray, *, chunk: int = 64 << 20) -> np.ndarray:
    """An in-memory copy of ``arr``, read from its file (when memory-mapped) in sequential
    chunks of ``chunk`` bytes whose page cache is dropped as it goes: the copy is the only
    memory it leaves behind. An in-memory array is returned as is."""
    place = file_of(arr) if arr.flags.c_contiguous else None
    if place is None:
        return arr
    name, first = place.path, place.offset
    out = np.empty(arr.shape, dtype=arr.dtype)
    flat = out.reshape(-1).view(np.uint8)
    fd = os.open(str(name), os.O_RDONLY)
    try:
        pos = 0
        while pos < flat.shape[0]:
            k = os.preadv(fd, [memoryview(flat[pos : pos + chunk])], first + pos)
            if k <= 0:
                raise OSError(f"{name}: file ends after {pos} of {flat.shape[0]} bytes")
            os.posix_fadvise(fd, first + pos, k, os.POSIX_FADV_DONTNEED)
            pos += k
    finally:
        os.close(fd)
    return out
