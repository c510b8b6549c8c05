"""``MemoryRows``: the :class:`~shoal.rows.source.RowSource` of an in-memory 2-D array."""

from __future__ import annotations

import numpy as np

from shoal.rows.direct import RowFile
from shoal.rows.source import FileShape, ReadStats

__all__ = ["MemoryRows"]


class MemoryRows(FileShape):
    """The :class:`~shoal.rows.source.RowSource` interface over an in-memory 2-D array (a
    stacked member that is small enough to live in memory); nothing is read from disk, so
    :meth:`read` returns 0 and :attr:`stats` stays at zero."""

    def __init__(self, arr: np.ndarray) -> None:
        self.arr = arr
        self.file = RowFile(
            path="<memory>",
            offset=0,
            stride=arr.shape[1] * arr.itemsize,
            row_bytes=arr.shape[1] * arr.itemsize,
            num_rows=arr.shape[0],
            dim=arr.shape[1],
            dtype=arr.dtype,
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
