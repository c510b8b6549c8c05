"""``StackedReader``: several row sources read as one, stacked one after another."""

from __future__ import annotations

import numpy as np

from shoal.rows.decode import source_scales
from shoal.rows.direct import RowFile
from shoal.rows.source import FileShape, ReadStats, RowSource

__all__ = ["StackedReader"]


def _stacked_scales(readers: list[RowSource]) -> np.ndarray | None:
    """The members' int8 scales one after another (None unless int8)."""
    if np.dtype(readers[0].dtype) != np.int8:
        return None
    return np.concatenate([np.asarray(source_scales(r), np.float32) for r in readers])


class StackedReader(FileShape):
    """Planned reads over several row sources stacked one after another: row ``v`` of the
    stack is row ``v - start[k]`` of member ``k`` (e.g. a store part's core rows, then its halo
    rows). Members are any :class:`~shoal.rows.source.RowSource`
    (:class:`~shoal.rows.direct.RowReader` for files, :class:`~shoal.rows.memory.MemoryRows`
    for arrays); the stack is one too. ``ids`` are sorted, so each member's rows are one
    contiguous slice of them and each member is read with its own planned pass."""

    def __init__(self, readers: list[RowSource]) -> None:
        if not readers:
            raise ValueError("StackedReader needs at least one member")
        if len({(r.dim, np.dtype(r.dtype)) for r in readers}) != 1:
            raise ValueError("stacked rows differ in width or dtype")
        self.readers = readers
        self.starts = np.concatenate([[0], np.cumsum([r.num_rows for r in readers])]).astype(
            np.int64
        )
        r0 = readers[0]
        self.file = RowFile(
            path=r0.path,
            offset=0,
            stride=r0.row_bytes,
            row_bytes=r0.row_bytes,
            num_rows=int(self.starts[-1]),
            dim=r0.dim,
            dtype=r0.dtype,
            scales=_stacked_scales(readers),
        )
        self.direct = all(getattr(r, "direct", False) for r in readers)

    @property
    def stats(self) -> ReadStats:
        return ReadStats.total(self.readers)

    def read(
        self,
        ids: np.ndarray,
        out: np.ndarray,
        dest: np.ndarray | None = None,
        out2: np.ndarray | None = None,
    ) -> int:
        """As :meth:`~shoal.rows.source.RowSource.read` over the stacked rows."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        n = len(ids)
        if n and (ids[0] < 0 or ids[-1] >= self.starts[-1] or np.any(np.diff(ids) <= 0)):
            raise ValueError(f"ids must be sorted, unique and in [0, {int(self.starts[-1])})")
        dest = np.arange(n, dtype=np.int64) if dest is None else np.asarray(dest, np.int64)
        cut = np.searchsorted(ids, self.starts)
        total = 0
        for k, r in enumerate(self.readers):
            a, b = int(cut[k]), int(cut[k + 1])
            if b > a:
                total += r.read(ids[a:b] - self.starts[k], out, dest[a:b], out2)
        return total

    def close(self) -> None:
        for r in self.readers:
            r.close()
