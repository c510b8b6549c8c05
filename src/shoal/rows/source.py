"""``RowSource``: the interface of everything rows are read from, and its counters.

A row source holds ``num_rows`` rows of ``dim`` items of one ``dtype`` and copies any set of
them, named by sorted unique ids, into a caller's buffer in one call (:meth:`RowSource.read`),
so it may plan the reads (sort, coalesce, read in parallel). shoal's are a file's rows
(:class:`~shoal.rows.direct.RowReader`), an in-memory array
(:class:`~shoal.rows.memory.MemoryRows`) and several stacked
(:class:`~shoal.rows.stacked.StackedReader`); :func:`~shoal.rows.opener.open_rows` picks one,
and takes any object that implements this protocol as it is: another backend (a remote store,
a compressed file, a test's counting source) plugs in by implementing these members.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["FileShape", "ReadStats", "RowSource", "check_read"]


@dataclass
class ReadStats:
    """Counters of a reader: rows delivered, bytes read from the file, read requests, reads."""

    rows: int = 0
    bytes: int = 0
    requests: int = 0
    calls: int = 0

    def add(self, rows: int, nbytes: int, requests: int) -> None:
        self.rows += rows
        self.bytes += nbytes
        self.requests += requests
        self.calls += 1

    @classmethod
    def total(cls, sources: Iterable[Any]) -> ReadStats:
        """The counters of ``sources`` (None skipped) summed."""
        stats = [s.stats for s in sources if s is not None]
        names = ("rows", "bytes", "requests", "calls")
        return cls(*(sum(getattr(st, k) for st in stats) for k in names))


@runtime_checkable
class RowSource(Protocol):
    """Rows read by sets of sorted ids into a caller's buffer (module docstring).

    ``isinstance(x, RowSource)`` checks that ``x`` has every member below (not their types).
    """

    @property
    def num_rows(self) -> int:
        """Rows held (ids are ``0 .. num_rows - 1``)."""
        ...

    @property
    def dim(self) -> int:
        """Items per row (the columns of ``out``)."""
        ...

    @property
    def dtype(self) -> np.dtype:
        """The dtype of a row's items as stored (that of ``out``): a feature dtype of
        :mod:`shoal.utils.featdtype` (``uint16`` is bfloat16; int8 rows are decoded with the
        source's ``scales``, an optional member: :func:`~shoal.rows.decode.source_scales`)."""
        ...

    @property
    def row_bytes(self) -> int:
        """Bytes of one row (``dim * dtype.itemsize``)."""
        ...

    @property
    def path(self) -> str:
        """Where the rows come from: a file's path (of the first member of a stack), or a
        name in angle brackets (``"<memory>"``) when there is no file. Epoch packs go beside
        it unless a scratch directory is given (:class:`~shoal.rows.packing.Packs`)."""
        ...

    @property
    def stats(self) -> ReadStats:
        """What the reads so far did (rows, bytes read, requests, calls)."""
        ...

    def bytes_for(self, ids: np.ndarray) -> int:
        """Bytes a read of the rows ``ids`` (sorted, unique) delivers."""
        ...

    def read(
        self,
        ids: np.ndarray,
        out: np.ndarray,
        dest: np.ndarray | None = None,
        out2: np.ndarray | None = None,
    ) -> int:
        """Row ``ids[i]`` into ``out[dest[i]]`` (default ``out[i]``); with ``out2``, a negative
        ``dest[i]`` sends the row to ``out2[-1 - dest[i]]`` instead (two arrays filled by one
        pass). ``ids`` are sorted and unique, ``out`` (and ``out2``) C-contiguous arrays of
        :attr:`dtype` with :attr:`dim` columns. Returns the bytes read from storage (0 when
        nothing was read: rows in memory). Safe to call from several threads."""
        ...

    def close(self) -> None:
        """Release the source's files and threads (idempotent)."""
        ...


class FileShape:
    """The shape half of :class:`RowSource` for a source described by a ``file`` (a
    :class:`~shoal.rows.direct.RowFile`: rows, width, dtype, bytes per row, path), shared by
    the file, in-memory and stacked sources."""

    file: Any

    @property
    def num_rows(self) -> int:
        return self.file.num_rows

    @property
    def dim(self) -> int:
        return self.file.dim

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.file.dtype)

    @property
    def row_bytes(self) -> int:
        return self.file.row_bytes

    @property
    def path(self) -> str:
        return self.file.path

    @property
    def scales(self) -> np.ndarray | None:
        """The per-row float32 scales of int8 rows (indexed by row id), else None."""
        return self.file.scales

    def bytes_for(self, ids: np.ndarray) -> int:
        """Bytes the rows ``ids`` (sorted, unique) occupy (what a read of them delivers)."""
        return len(ids) * self.file.row_bytes


def check_read(
    ids: np.ndarray,
    out: np.ndarray,
    dest: np.ndarray | None,
    out2: np.ndarray | None,
    *,
    num_rows: int,
    dim: int,
    dtype: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """The arguments of :meth:`RowSource.read` checked against a source of ``num_rows`` rows
    of ``dim`` items of ``dtype``: ``(ids, dest)`` as contiguous int64 (``dest`` default
    ``0 .. n - 1``); a ValueError names the argument that does not fit."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    n = len(ids)
    if out.dtype != dtype or out.ndim != 2 or out.shape[1] != dim:
        raise ValueError(f"out must be ({n}+, {dim}) {dtype}, got {out.shape} {out.dtype}")
    if not out.flags.c_contiguous:
        raise ValueError("out must be C-contiguous")
    dest = np.arange(n, dtype=np.int64) if dest is None else np.asarray(dest, np.int64)
    if n == 0:
        return ids, dest
    # (a comparison, not np.diff: a byte an id, not eight, for the tens of millions a
    # group's pass over neighbour lists reads)
    if ids[0] < 0 or ids[-1] >= num_rows or not np.all(ids[1:] > ids[:-1]):
        raise ValueError(f"ids must be sorted, unique and in [0, {num_rows})")
    low = -out2.shape[0] if out2 is not None else 0
    if len(dest) != n or dest.min() < low or dest.max() >= out.shape[0]:
        raise ValueError("dest must give one row of out (or out2) per id")
    if out2 is not None and (
        out2.dtype != dtype or not out2.flags.c_contiguous or out2.ndim != 2 or out2.shape[1] != dim
    ):
        raise ValueError("out2 must be like out")
    return ids, dest
