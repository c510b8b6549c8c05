"""``TypedRows``: a typed graph's feature rows as one :class:`~shoal.rows.source.RowSource`.

A typed graph (:mod:`shoal.data.hetero`) gives each node type ``t`` its own feature file of
width ``F_t``, or none. Read as one source, its rows are ``F = max_t F_t`` wide: a row of type
``t`` holds its features in columns ``[:F_t]`` and zeros beyond (a featureless type's rows are
all zeros and cost no I/O), so every mechanism written against the row-source interface serves
a typed graph as it serves an untyped one; the models slice each type's columns.

The rows are a list of :class:`Segment` s, each ``counts[t]`` rows of each type,
**contiguous** (type 0's rows, then type 1's, ...: a graph's id space, a store part's core
rows) or **mixed** (a type per row: a part's halo rows, in halo order). Each type has one
*member* source (None: featureless) holding that type's rows of every segment, in segment order
(a part's ``features/<t>.npy`` then ``halo_features/<t>.npy``, stacked); a
:meth:`TypedRows.read` of sorted ids reads each member once, its ids sorted. Openers:
:func:`open_typed_rows` (a typed graph directory) and :func:`open_part_rows` (parts of a
typed store).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shoal.errors import ShoalInputError
from shoal.rows.memory import MemoryRows
from shoal.rows.opener import open_rows
from shoal.rows.source import ReadStats, RowSource, check_read
from shoal.rows.stacked import StackedReader

__all__ = ["Segment", "TypedRows", "open_part_rows", "open_typed_rows"]


def _type_dtype(num_types: int) -> np.dtype:
    """The smallest signed integer dtype of a type index (numpy sorts them by radix)."""
    for dt in (np.int8, np.int16, np.int32):
        if num_types <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.int64)


class Segment:
    """A run of rows of a :class:`TypedRows` stack: ``counts[t]`` rows of each type ``t``.

    Build it with :meth:`contiguous` (each type one range of rows, in type order) or
    :meth:`mixed` (the type of every row given; a row's place in its type's member is the
    number of rows of its type before it in the segment)."""

    def __init__(self, counts: Any, types: np.ndarray | None = None) -> None:
        self.counts = np.asarray(counts, np.int64).reshape(-1)
        if self.counts.size and self.counts.min() < 0:
            raise ValueError(f"segment counts must be >= 0, got {self.counts.tolist()}")
        self.num_types = int(self.counts.size)
        #: contiguous: type ``t`` is rows ``[starts[t], starts[t + 1])`` of the segment
        self.starts = np.zeros(self.num_types + 1, np.int64)
        np.cumsum(self.counts, out=self.starts[1:])
        self.types = types
        self.rank: np.ndarray | None = None
        if types is not None:
            n = len(types)
            order = np.argsort(types, kind="stable")
            rank = np.empty(n, np.int64 if n >= 2**31 else np.int32)
            rank[order] = np.arange(n) - self.starts[np.asarray(types[order], np.int64)]
            #: mixed: row ``k`` is the ``rank[k]``-th of its type in the segment
            self.rank = rank

    @classmethod
    def contiguous(cls, counts: Any) -> Segment:
        """``counts[0]`` rows of type 0, then ``counts[1]`` of type 1, ..."""
        return cls(counts)

    @classmethod
    def mixed(cls, types: Any, num_types: int) -> Segment:
        """Rows whose types are ``types`` (one per row, each in ``[0, num_types)``)."""
        types = np.asarray(types)
        if types.ndim != 1:
            raise ValueError(f"types must be 1-D, got shape {types.shape}")
        if len(types) and (types.min() < 0 or types.max() >= num_types):
            raise ValueError(f"types must be in [0, {num_types})")
        t = np.ascontiguousarray(types, dtype=_type_dtype(num_types))
        return cls(np.bincount(t, minlength=num_types)[:num_types], t)

    @property
    def num_rows(self) -> int:
        return int(self.starts[-1])

    def locate(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The type of rows ``local`` (of this segment) and their place among the segment's
        rows of that type."""
        if self.types is None:
            t = np.searchsorted(self.starts, local, side="right") - 1  # empty types skipped
            return t, local - self.starts[t]
        return self.types[local], self.rank[local]

    def __repr__(self) -> str:
        kind = "mixed" if self.types is not None else "contiguous"
        return f"Segment.{kind}(counts={self.counts.tolist()})"


class TypedRows:
    """Rows of a typed graph padded to one width, read through per-type members (module
    docstring). A :class:`~shoal.rows.source.RowSource`.

    Args:
        members: per node type, the source of its rows (every segment's rows of the type, in
            segment order), or None for a type without features (its rows read as zeros).
        segments: the stack's rows, in order (:class:`Segment`).
        widths: per type, its feature width ``F_t`` (default: the member's ``dim``, 0 for
            None); given when the padded width must agree across stacks (a store's parts).
        dim: the padded width ``F`` (default ``max(widths)``).
        dtype: of the rows (default: the members'; float32 when there is none).

    Raises ValueError when the members differ in dtype, a member's rows are not its type's
    rows over the segments, a type with rows has a width but no member, or ``F`` is 0.
    """

    def __init__(
        self,
        members: Sequence[RowSource | None],
        segments: Sequence[Segment],
        *,
        widths: Sequence[int] | None = None,
        dim: int | None = None,
        dtype: Any = None,
    ) -> None:
        members = [None if m is None or int(m.dim) == 0 else m for m in members]
        t = len(members)
        if not segments:
            raise ValueError("TypedRows needs at least one segment")
        if any(s.num_types != t for s in segments):
            raise ValueError(f"every segment must count rows of the {t} member types")
        given = {np.dtype(m.dtype) for m in members if m is not None}
        if len(given) > 1:
            raise ValueError(
                f"the node types' rows differ in dtype ({sorted(str(d) for d in given)}): "
                "one typed source holds one dtype (convert the features, e.g. to float32)"
            )
        common = given.pop() if given else None
        self.dtype = np.dtype(dtype if dtype is not None else common or np.float32)
        if common is not None and common != self.dtype:
            raise ValueError(f"the node types' rows are {common}, not {self.dtype}")
        if widths is None:
            widths = [0 if m is None else int(m.dim) for m in members]
        self.widths = np.asarray(widths, np.int64).reshape(-1)
        if len(self.widths) != t:
            raise ValueError(f"widths must give {t} types, got {len(self.widths)}")
        self.segments = list(segments)
        self.members = members
        self.num_types = t
        totals = np.sum([s.counts for s in self.segments], axis=0).reshape(t)
        #: ``bases[s, t]``: the row of type ``t``'s member holding segment ``s``'s first row of it
        self.bases = np.zeros((len(self.segments), t), np.int64)
        if len(self.segments) > 1:
            np.cumsum([s.counts for s in self.segments[:-1]], axis=0, out=self.bases[1:])
        for k, m in enumerate(members):
            if m is None:
                if self.widths[k] > 0 and totals[k] > 0:
                    raise ValueError(f"type {k} has {totals[k]} rows of width {self.widths[k]}")
                continue
            if int(m.dim) != self.widths[k]:
                raise ValueError(f"type {k}'s rows are {m.dim} wide, its width is {self.widths[k]}")
            if int(m.num_rows) != totals[k]:
                raise ValueError(
                    f"type {k}'s member holds {m.num_rows} rows, its segments {totals[k]}"
                )
        self.dim = int(self.widths.max(initial=0)) if dim is None else int(dim)
        if self.dim <= 0:
            raise ValueError("no node type has features: there are no rows to read")
        if self.widths.size and self.widths.max() > self.dim:
            raise ValueError(f"dim {self.dim} is narrower than a type ({self.widths.max()})")
        self.starts = np.zeros(len(self.segments) + 1, np.int64)
        np.cumsum([s.num_rows for s in self.segments], out=self.starts[1:])
        self.num_rows = int(self.starts[-1])
        self.row_bytes = self.dim * self.dtype.itemsize
        first = [m.path for m in members if m is not None]
        self.path = first[0] if first else "<typed>"
        self.direct = all(getattr(m, "direct", False) for m in members if m is not None)
        self._tdtype = _type_dtype(t)

    # ------------------------------------------------------------------ the shape
    @property
    def stats(self) -> ReadStats:
        """The members' reads summed (rows read, bytes really read: never padding nor a
        featureless row; requests; calls, one per member read)."""
        return ReadStats.total(self.members)

    def bytes_for(self, ids: np.ndarray) -> int:
        """Bytes a read of the rows ``ids`` delivers into ``out`` (padded rows: ``len(ids) *
        row_bytes``); :meth:`bytes_of` is what they occupy in storage."""
        return len(ids) * self.row_bytes

    def bytes_of(self, ids: np.ndarray) -> int:
        """Bytes the rows ``ids`` (any order) occupy in their members: ``F_t`` items per row
        of type ``t``, none for a featureless row (what reading them costs)."""
        if len(ids) == 0:
            return 0
        per = np.bincount(self.type_of(ids), minlength=self.num_types)
        return int(per @ self.widths) * self.dtype.itemsize

    def type_of(self, ids: np.ndarray) -> np.ndarray:
        """The node type of the stack's rows ``ids`` (any order)."""
        return self._locate(np.asarray(ids, np.int64))[0]

    def _locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Type and member row of every id in ``ids`` (any order, in range)."""
        n = len(ids)
        types = np.empty(n, self._tdtype)
        rows = np.empty(n, np.int64)
        if len(self.segments) == 1:
            t, r = self.segments[0].locate(ids)
            types[:] = t
            rows[:] = self.bases[0][t] + r
            return types, rows
        seg = np.searchsorted(self.starts, ids, side="right") - 1
        for s, g in enumerate(self.segments):
            sel = np.flatnonzero(seg == s)
            if len(sel):
                t, r = g.locate(ids[sel] - self.starts[s])
                types[sel] = t
                rows[sel] = self.bases[s][t] + r
        return types, rows

    # ------------------------------------------------------------------ reads
    def _check(self, ids, out, dest, out2) -> tuple[np.ndarray, np.ndarray]:
        return check_read(
            ids, out, dest, out2, num_rows=self.num_rows, dim=self.dim, dtype=self.dtype
        )

    def read(
        self,
        ids: np.ndarray,
        out: np.ndarray,
        dest: np.ndarray | None = None,
        out2: np.ndarray | None = None,
    ) -> int:
        """As :meth:`~shoal.rows.source.RowSource.read`: row ``ids[i]`` (padded to
        :attr:`dim`) into ``out[dest[i]]``, or ``out2[-1 - dest[i]]`` for a negative
        ``dest[i]``. Each type's member is read once, its rows sorted; a row narrower than
        :attr:`dim` is read into a staging buffer, then copied with zeros beyond its width.
        Returns the bytes read from storage (padding and featureless rows cost none)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        ids, dest = self._check(ids, out, dest, out2)
        n = len(ids)
        if n == 0:
            return 0
        types, rows = self._locate(ids)
        if self.num_types == 1:
            order, cuts = None, np.array([0, n])
        else:
            order = np.argsort(types, kind="stable")  # ids (so member rows) stay ascending
            cuts = np.zeros(self.num_types + 1, np.int64)
            np.cumsum(np.bincount(types, minlength=self.num_types), out=cuts[1:])
        total = 0
        for t in range(self.num_types):
            a, b = int(cuts[t]), int(cuts[t + 1])
            if b == a:
                continue
            sel = slice(None) if order is None else order[a:b]
            d, r = dest[sel], rows[sel]
            m, w = self.members[t], int(self.widths[t])
            if m is not None and w == self.dim:  # full width: straight into place
                total += m.read(r, out, d, out2)
                continue
            buf = None
            if m is not None:
                buf = np.empty((b - a, w), self.dtype)
                total += m.read(r, buf)
            w = 0 if m is None else w
            pos = d >= 0
            for target, at, keep in (
                (out, d, pos),
                (out2, -1 - d, ~pos),
            ):
                if target is None or not keep.any():
                    continue
                at = at[keep]
                if buf is not None:
                    target[at, :w] = buf[keep]
                target[at, w:] = 0
        return total

    def close(self) -> None:
        """Close every member (idempotent)."""
        for m in self.members:
            if m is not None:
                m.close()

    def __repr__(self) -> str:
        return (
            f"TypedRows({self.num_rows} rows, dim={self.dim}, widths={self.widths.tolist()}, "
            f"segments={self.segments})"
        )


# ---------------------------------------------------------------------- openers


def _member(arrays: Sequence[np.ndarray], **kw) -> RowSource | None:
    """One type's rows (``arrays`` stacked): a file read with planned direct reads
    (:func:`~shoal.rows.opener.open_rows`), an in-memory array copied; None without rows."""
    readers: list[RowSource] = []
    for a in arrays:
        if a is None or a.shape[0] == 0:
            continue
        r = open_rows(a, **kw)
        readers.append(r if r is not None else MemoryRows(np.ascontiguousarray(a)))
    if not readers:
        return None
    return readers[0] if len(readers) == 1 else StackedReader(readers)


def _kw(threads: int, merge_gap: int | None) -> dict[str, int]:
    kw = {"threads": threads}
    if merge_gap is not None:
        kw["merge_gap"] = merge_gap
    return kw


def open_typed_rows(
    graph: Any, *, threads: int = 8, merge_gap: int | None = None
) -> TypedRows | None:
    """The feature rows of a typed graph directory (a :class:`~shoal.data.format.GraphDir`:
    its ``schema`` and ``node_features(type)``), in original-id order, padded to the widest
    type; None when no type has features. ``threads`` / ``merge_gap``: of the
    :class:`~shoal.rows.direct.RowReader` of each type's file."""
    schema = graph.schema
    if schema is None:
        raise ValueError("an untyped graph: read its features() with open_rows")
    kw = _kw(threads, merge_gap)
    members, widths = [], []
    for nt in schema.node_types:
        x = graph.node_features(nt.name)
        if x is not None and x.shape[0] != nt.count:
            raise ShoalInputError(
                f"node type {nt.name!r} has {nt.count} nodes but {x.shape[0]} feature rows",
                path=getattr(graph, "path", None),
                fix="rewrite the graph directory",
            )
        widths.append(0 if x is None else int(x.shape[1]))
        members.append(None if x is None else _member([x], **kw))
    if max(widths, default=0) == 0:
        return None
    counts = [nt.count for nt in schema.node_types]
    return TypedRows(members, [Segment.contiguous(counts)], widths=widths)


def open_part_rows(
    parts: Any, *, halo: bool = True, threads: int = 8, merge_gap: int | None = None
) -> TypedRows | None:
    """The feature rows of one part of a typed store (a
    :class:`~shoal.store.reader.Partition`), or of several stacked in the order given, in
    each part's local order: its core rows (type-contiguous: ``type_bounds``), then with
    ``halo`` its halo rows (types mixed, in halo order), as the untyped part's ``features``
    then ``halo_features``. Padded to the widest type of the store, so every part's source
    is as wide. None when no type has features. Raises ShoalInputError when ``halo`` rows
    of a type with features are missing (a store built without ``--halo-features``)."""
    parts = list(parts) if isinstance(parts, (list, tuple)) else [parts]
    if not parts:
        raise ValueError("open_part_rows needs at least one part")
    store = parts[0].store
    schema = store.schema_or_raise()
    dims = store.type_feature_dims
    names = [nt.name for nt in schema.node_types]
    widths = [int(dims.get(name, 0)) for name in names]
    if max(widths, default=0) == 0:
        return None
    t = len(names)
    segments: list[Segment] = []
    arrays: list[list[np.ndarray]] = [[] for _ in range(t)]
    for p in parts:
        bounds = np.asarray(p.type_bounds, np.int64)
        segments.append(Segment.contiguous(np.diff(bounds)))
        hids = np.asarray(p.halo_ids, np.int64) if halo and p.num_halo else None
        htypes = store.type_of(hids) if hids is not None else None
        for k, name in enumerate(names):
            if not widths[k]:
                continue
            if bounds[k + 1] > bounds[k]:
                core = p.type_features(name)
                if core is None:
                    raise ShoalInputError(
                        f"part {p.index} has no feature rows of node type {name!r}",
                        path=p.path,
                        fix="rebuild the store with `shoal store build`",
                    )
                arrays[k].append(core)
            if htypes is not None and np.any(htypes == k):
                rows = p.halo_type_features(name)
                if rows is None:
                    raise ShoalInputError(
                        f"part {p.index} lacks its halo nodes' feature rows of type {name!r}",
                        path=p.path,
                        fix="rebuild the store with `shoal store build ... --halo-features`",
                    )
                arrays[k].append(rows)
        if htypes is not None:
            segments.append(Segment.mixed(htypes, t))
    kw = _kw(threads, merge_gap)
    members = [_member(a, **kw) if widths[k] else None for k, a in enumerate(arrays)]
    # a type without rows in these parts keeps its width (None member, no rows to read)
    return TypedRows(members, segments, widths=widths, dim=max(widths))
