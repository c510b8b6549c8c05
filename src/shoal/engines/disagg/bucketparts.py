"""A batch worker's resident parts, loaded from the store's edge buckets (Armada, Section 3).

Armada's storage layer keeps, for every pair of partitions ``(i, j)``, the edges from nodes of
``i`` to nodes of ``j`` sequentially in **edge bucket** ``(i, j)`` (shoal's store writes them:
``docs/store.md``). :class:`ResidentParts` loads part ``j`` with the buckets ``(*, j)`` --
every in-edge of its nodes -- or, with local sampling, only the buckets among resident parts.

A loaded part has the attributes :class:`~shoal.distributed.DistNeighborSampler` reads from a
store :class:`~shoal.store.Partition` plus its core feature rows, read in one sequential pass.
Its rows' neighbours are in the store part's order (sources by new id; on a typed store
grouped by relation first, an edge's relation being its endpoints' types' pair:
:meth:`~shoal.data.hetero.HeteroSchema.pair_relations`), so with remote sampling a loaded
part's CSR equals the store part's entry for entry and a swapped-out part can be sampled from
the store's files with the same draws (:class:`~shoal.engines.disagg.sampling.BatchSampler`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shoal.rows.decode import decode_rows
from shoal.rows.direct import load_array
from shoal.rows.parts import part_rows
from shoal.store.reader import Store
from shoal.utils.featdtype import scales_of

__all__ = ["LoadedPart", "ResidentParts", "part_bytes"]


@dataclass
class LoadedPart:
    """One resident part (see the module docstring). A typed store's part also has
    ``type_bounds`` (its core rows of each node type), ``edge_types`` (the relation of every
    CSR entry) and the store's ``relation_of`` (``(T, T)``: the relation of a (source type,
    destination type) pair) and ``type_of`` (the node type of new ids)."""

    index: int
    start: int
    num_core: int
    features: np.ndarray
    buckets: dict[int, np.ndarray] = field(default_factory=dict)
    indptr: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    indices: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    halo_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    type_bounds: np.ndarray | None = None
    edge_types: np.ndarray | None = None
    relation_of: np.ndarray | None = field(default=None, repr=False)
    type_of: Any = field(default=None, repr=False)

    @property
    def num_nodes(self) -> int:
        """Core and halo nodes (the local id space; link prediction's exclusion keys)."""
        return self.num_core + len(self.halo_ids)

    @property
    def nbytes(self) -> int:
        arrays = [self.features, self.indptr, self.indices, self.halo_ids, *self.buckets.values()]
        if self.edge_types is not None:
            arrays.append(self.edge_types)
        return int(sum(a.nbytes for a in arrays))

    def rebuild(self) -> None:
        """The CSR (rows = this part's nodes, in-edges) of the buckets held."""
        keys = sorted(self.buckets)
        edges = [self.buckets[k] for k in keys]
        src = (
            np.concatenate([e[:, 0] for e in edges]).astype(np.int64)
            if edges
            else np.zeros(0, np.int64)
        )
        dst = np.concatenate([e[:, 1] for e in edges]).astype(np.int64) if edges else src
        rows = dst - self.start
        self.indptr = np.zeros(self.num_core + 1, np.int64)
        np.cumsum(np.bincount(rows, minlength=self.num_core), out=self.indptr[1:])
        inside = (src >= self.start) & (src < self.start + self.num_core)
        self.halo_ids, inv = np.unique(src[~inside], return_inverse=True)
        local = np.empty(len(src), np.int64)
        local[inside] = src[inside] - self.start
        local[~inside] = self.num_core + inv
        if self.relation_of is None:
            # rows in order, each row's sources by new id (the store part's order)
            self.indices = local[np.lexsort((src, rows))]
            return
        # a typed store's order: rows, each grouped by relation, sources by new id inside
        rel = self.relation_of[self.type_of(src), self.type_of(dst)].astype(np.int64)
        order = np.lexsort((src, rel, rows))
        self.indices = local[order]
        self.edge_types = rel[order].astype(self.edge_types.dtype)  # the store part's dtype


def part_bytes(store: Store, *, local: bool = False) -> np.ndarray:
    """Memory one resident part takes (features, its buckets, the CSR built from them):
    used to decide how many parts a batch worker loads together. With ``local`` the buckets
    from other parts are counted too (an upper bound)."""
    counts = store.bucket_counts
    edges = counts.sum(0)
    item = np.dtype(store.meta["edge_dtype"]).itemsize
    core = np.diff(np.asarray(store.part_offsets, np.int64))
    feat = core * int(store.feature_dim or 0) * 4
    # bucket copies (2 ids) + CSR (indices, indptr) + halo ids (at most one per edge)
    out = feat + edges * (2 * item + 8 + 8) + 8 * (core + 1)
    if store.schema is not None:  # a typed part: the relation of every entry too
        out = out + edges * np.dtype(store.part(0).edge_types.dtype).itemsize
    return out


class ResidentParts:
    """The parts a batch worker holds, loaded from edge buckets; counts what it reads.

    Args:
        store: the opened store. local: local sampling (buckets among resident parts only).
    """

    def __init__(self, store: Store, *, local: bool = False) -> None:
        self.store = store
        self.local = local
        self.parts: dict[int, LoadedPart] = {}
        self.loads: list[int] = []  # parts loaded, in order (each once per epoch)
        self.bytes_read = 0
        self.buckets_read = 0

    def _bucket(self, i: int, j: int) -> np.ndarray:
        b = load_array(self.store.bucket(i, j))
        self.bytes_read += int(b.nbytes)
        self.buckets_read += 1
        return np.asarray(b)

    def load(self, j: int) -> None:
        """Read part ``j`` (its features, then its buckets) and make it resident."""
        if j in self.parts:
            raise ValueError(f"part {j} is already resident")
        s = self.store
        start = int(s.part_offsets[j])
        core = int(s.part_offsets[j + 1]) - start
        if s.schema is None:
            feats = s.part(j).features
            raw = load_array(feats)[:core]  # as stored, then decoded into float32
            f = raw if raw.dtype == np.float32 else np.empty((core, raw.shape[1]), np.float32)
            if f is not raw:
                scales = scales_of(feats)
                scales = None if scales is None else np.asarray(scales[:core], np.float32)
                decode_rows(raw, np.arange(core, dtype=np.int64), f, scales=scales)
            self.bytes_read += int(raw.nbytes)
            part = LoadedPart(j, start, core, f)
        else:  # every type's rows, padded to the widest type, in one planned read
            src = part_rows(s.part(j))
            f = np.zeros((core, int(s.feature_dim or 0)), np.float32)
            if src is not None:
                try:
                    self.bytes_read += int(src.read(np.arange(core, dtype=np.int64), f))
                finally:
                    src.close()
            part = LoadedPart(
                j,
                start,
                core,
                f,
                type_bounds=np.asarray(s.part(j).type_bounds, np.int64),
                edge_types=np.zeros(0, np.asarray(s.part(j).edge_types[:0]).dtype),
                relation_of=s.schema.pair_relations(),
                type_of=s.type_of,
            )
        sources = sorted(self.parts) + [j] if self.local else range(s.num_parts)
        for i in sources:
            part.buckets[int(i)] = self._bucket(int(i), j)
        if self.local:  # the new part's edges into the resident ones
            for k, other in self.parts.items():
                other.buckets[j] = self._bucket(j, k)
                other.rebuild()
        part.rebuild()
        self.parts[j] = part
        self.loads.append(j)

    def evict(self, j: int) -> None:
        """Drop part ``j`` (and, with local sampling, its edges into the others)."""
        self.parts.pop(j)
        if self.local:
            for other in self.parts.values():
                if other.buckets.pop(j, None) is not None:
                    other.rebuild()

    def clear(self) -> None:
        self.parts.clear()

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts.values())

    def rows(self, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Feature rows of ``ids`` (all in resident parts) into ``out``."""
        starts = np.asarray(self.store.part_offsets, np.int64)
        owner = np.searchsorted(starts, ids, side="right") - 1
        for j in np.unique(owner):
            sel = np.flatnonzero(owner == j)
            p = self.parts[int(j)]
            out[sel] = p.features[ids[sel] - p.start]  # decoded when the part was loaded
        return out[: len(ids)]
