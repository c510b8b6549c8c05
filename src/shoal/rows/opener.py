"""``open_rows``: the row source of an array, a list of arrays stacked row-wise, or a source;
the one place that decides how rows are read."""

from __future__ import annotations

import numpy as np

from shoal.rows.backends import current_row_backend, get_row_backend
from shoal.rows.direct import RowFile
from shoal.rows.memory import MemoryRows
from shoal.rows.source import RowSource
from shoal.rows.stacked import StackedReader

__all__ = ["open_file", "open_rows"]


def open_file(f: RowFile, **kw) -> RowSource:
    """The source of a file's rows made by the process's row backend (``kw``: ``threads``,
    ``merge_gap``, ``direct``)."""
    return get_row_backend(current_row_backend())(f, **kw)


def _rows(member) -> int:
    return member.num_rows if isinstance(member, RowSource) else int(member.shape[0])


def open_rows(rows, **kw) -> RowSource | None:
    """A row source of ``rows``: one 2-D array, a :class:`~shoal.rows.source.RowSource`
    (returned as it is), or a list of them stacked row-wise (members without rows are
    skipped); None when every row is an in-memory array already (nothing to plan).
    Memory-mapped arrays are read from their files, in-memory members of a stack copied (a
    stack may mix both, and other sources). ``kw`` go to :class:`~shoal.rows.direct.RowReader`
    (``threads``, ``merge_gap``, ``direct``)."""
    if isinstance(rows, RowSource):
        return rows
    if isinstance(rows, np.ndarray):
        f = RowFile.of(rows)
        return open_file(f, **kw) if f is not None else None
    members = [m for m in rows if _rows(m) > 0]
    files = [None if isinstance(m, RowSource) else RowFile.of(m) for m in members]
    given = [isinstance(m, RowSource) for m in members]
    if not members or not any(f is not None or g for f, g in zip(files, given, strict=True)):
        return None
    if len(members) == 1:
        return members[0] if given[0] else open_file(files[0], **kw)
    readers = [
        m if g else open_file(f, **kw) if f is not None else MemoryRows(m)
        for m, f, g in zip(members, files, given, strict=True)
    ]
    return StackedReader(readers)
