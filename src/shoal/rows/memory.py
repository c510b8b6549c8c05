"""Row sources over arrays: ``MemoryRows`` (an in-memory 2-D array) and ``MappedRows`` (a
file's rows through its memory map: the ``mmap`` row backend, :mod:`shoal.rows.backends`)."""

from __future__ import annotations

import numpy as np

from shoal.rows.direct import RowFile
from shoal.rows.source import FileShape, ReadStats
from shoal.utils.featdtype import scales_of

__all__ = ["MappedRows", "MemoryRows"]


class MemoryRows(FileShape):
    """The :class:`~shoal.rows.source.RowSource` interface over an in-memory 2-D array (a
    stacked member that is small enough to live in memory); nothing is read from disk, so
    :meth:`read` returns 0 and :attr:`stats` stays at zero."""

    def __init__(self, arr: np.ndarray, scales: np.ndarray | None = None) -> None:
        self.arr = arr
        if scales is None and arr.dtype == np.int8:
            scales = scales_of(arr)
        self.file = RowFile(
            path="<memory>",
            offset=0,
            stride=arr.shape[1] * arr.itemsize,
            row_bytes=arr.shape[1] * arr.itemsize,
            num_rows=arr.shape[0],
            dim=arr.shape[1],
            dtype=arr.dtype,
            scales=None if scales is None else np.ascontiguousarray(scales, np.float32),
        )
        self.direct = True
        self.stats = ReadStats()

    def read(self, ids, out, dest=None, out2=None) -> int:
        ids = np.asarray(ids, np.int64)
        dest = np.arange(len(ids), dtype=np.int64) if dest is None else np.asarray(dest)
        pos = dest >= 0
        out[dest[pos]] = self.arr[ids[pos]]
        if out2 is not None and not pos.all():
            out2[-1 - dest[~pos]] = self.arr[ids[~pos]]
        return 0

    def close(self) -> None:
        pass


class MappedRows(MemoryRows):
    """The ``mmap`` row backend: the rows of a :class:`RowFile` copied from the file's memory
    map, in sorted order (the page cache keeps what was read; no ``O_DIRECT``, no read
    planning). :attr:`stats` counts the rows' bytes as read (what was asked of the file).
    ``threads``, ``merge_gap`` and ``direct`` are accepted and ignored."""

    def __init__(self, rows: RowFile, **_: object) -> None:
        arr = np.memmap(
            rows.path,
            dtype=np.dtype(rows.dtype),
            mode="r",
            offset=rows.offset,
            shape=(rows.num_rows, rows.stride // np.dtype(rows.dtype).itemsize),
        )[:, : rows.dim]
        super().__init__(arr, rows.scales)
        self.file = rows
        self.direct = False

    def read(self, ids, out, dest=None, out2=None) -> int:
        super().read(ids, out, dest, out2)
        n = len(ids)
        self.stats.add(n, n * self.file.row_bytes, n)
        return n * self.file.row_bytes

    def close(self) -> None:
        self.arr = None
