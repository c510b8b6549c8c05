"""Distributed sampling and feature pulls over a typed store (``docs/store.md``, "Typed stores").

:class:`DistTypedSampler` is :class:`~shoal.distributed.DistNeighborSampler` with a fanout per
relation: a frontier node is still sampled by the rank owning it (DistDGL, Zheng et al., IA3
2020, Section 3.2), and that owner draws each relation's fanout from the relation's run of the
node's row (each row of a typed part is grouped by relation), as DGL's distributed
``sample_neighbors`` does per edge type. The exchanges are the untyped sampler's; a sampled
edge's relation is its endpoints' types (one relation per type pair, as the single-process
:class:`~shoal.sample.typed.TypedNeighborSampler`). With one rank and a one-part store the
batches equal that sampler's on the graph.

:class:`DistTypedFeatures` pulls each node type's rows from their owners: one
:class:`~shoal.distributed.DistFeatureStore` per type with features, over the type's ids
renumbered part by part (part ``i``'s nodes of type ``t`` are rows ``[toff[i], toff[i + 1])``),
and the rank's own rows read by planned direct reads of its parts' files
(:func:`~shoal.rows.opener.open_rows`: sorted, coalesced, never the page cache). One exchange
per type with features per step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from shoal.distributed.comm import CommStats
from shoal.distributed.feature_store import DistFeatureStore, owner_of
from shoal.distributed.sampler import DistNeighborSampler
from shoal.rows.opener import open_rows
from shoal.sample import _typed_kernels as TK
from shoal.sample.typed import RelationTables, TypedBatch, row_types, typed_batch
from shoal.store.reader import Partition, Store

__all__ = ["DistTypedFeatures", "DistTypedSampler"]


class DistTypedSampler(DistNeighborSampler):
    """Per-relation sampling over a typed store's parts spread across ranks.

    Args:
        store: the typed store (its schema and type ranges).
        relation_fanouts: per relation name, its own per-hop fanouts (default none: every
            relation takes ``fanouts``).
        **kwargs: :class:`~shoal.distributed.DistNeighborSampler`'s arguments.

    :meth:`sample` is collective and returns a :class:`~shoal.sample.typed.TypedBatch` whose
    ``n_id`` are the store's new ids."""

    def __init__(
        self,
        *,
        store: Store,
        relation_fanouts: Mapping[str, Sequence[int] | str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.schema = store.schema_or_raise()
        self.schema.pair_relations()  # refuses two relations between one type pair
        self.tables = RelationTables.of(self.schema, self.fanouts, relation_fanouts)
        self._row_type = {i: row_types(p.type_bounds) for i, p in self.parts.items()}
        self._etypes = {i: np.asarray(p.edge_types) for i, p in self.parts.items()}
        self._hop = 0

    def set_parts(self, parts: Sequence[Partition], part_to_rank: np.ndarray) -> None:
        super().set_parts(parts, part_to_rank)
        self._row_type = {i: row_types(p.type_bounds) for i, p in self.parts.items()}
        self._etypes = {i: np.asarray(p.edge_types) for i, p in self.parts.items()}

    def sample(self, seeds: np.ndarray, seed: int = 0, *, exclude=None) -> TypedBatch:
        """The typed blocks of ``seeds`` (new ids). Collective."""
        if exclude is not None:
            raise ValueError("the typed distributed sampler takes no exclude")
        self._hop = 0
        mb = super().sample(seeds, seed)
        return typed_batch(self.schema, mb, self.store.type_of(mb.n_id))

    def _draw_hop(self, n: int, fanout: int, key: np.uint64, exclude):
        self._fan = self.tables.fanouts[self._hop]  # this hop's, for own rows and peers'
        self._hop += 1
        return super()._draw_hop(n, fanout, key, exclude)

    def _rel_args(self, part: Partition) -> tuple:
        t = self.tables
        return (self._row_type[part.index], t.by_dst_ptr, t.by_dst, self._fan)

    def _count_rows(self, part: Partition, rows: np.ndarray, fanout: int, c: np.ndarray) -> None:
        et = self._etypes[part.index]
        TK._count_rel(part.indptr, et, rows, rows.shape[0], *self._rel_args(part), c)

    def _fill_rows(self, part, rows, rowptr, key, picked, dst) -> None:
        et = self._etypes[part.index]
        n = rows.shape[0]
        args = self._rel_args(part)
        TK._fill_rel(part.indptr, part.indices, et, rows, n, *args, rowptr, key, picked, dst)


class DistTypedFeatures:
    """Each node type's rows of a typed batch, pulled from their owners (module docstring).

    Args:
        store: the typed store.
        parts: the parts this rank holds.
        part_to_rank, rank, world_size: the plan and this process's place.
        stats: communication counters.
        threads: reading threads of the direct reads."""

    def __init__(
        self,
        *,
        store: Store,
        parts: Sequence[Partition],
        part_to_rank: np.ndarray,
        rank: int,
        world_size: int,
        stats: CommStats | None = None,
        threads: int = 8,
        group=None,
    ) -> None:
        self.schema = store.schema_or_raise()
        self.store = store
        b = store.type_bounds
        self.stores: list[DistFeatureStore | None] = []
        self.readers: list[Any] = []
        self._toff: list[np.ndarray] = []
        dims = store.type_feature_dims
        for t, nt in enumerate(self.schema.node_types):
            toff = np.zeros(store.num_parts + 1, np.int64)
            np.cumsum(b[:, t + 1] - b[:, t], out=toff[1:])
            self._toff.append(toff)
            if nt.name not in dims:
                self.stores.append(None)
                self.readers.append(None)
                continue
            local = {p.index: p.type_features(nt.name) for p in parts}
            arrays = [local[p.index] for p in sorted(parts, key=lambda q: q.index)]
            reader = open_rows(arrays, threads=threads) if arrays else None
            self.readers.append(reader)
            self.stores.append(
                DistFeatureStore(
                    part_offsets=toff,
                    part_to_rank=part_to_rank,
                    rank=rank,
                    world_size=world_size,
                    local_parts=local,
                    feature_dim=dims[nt.name],
                    stats=stats,
                    serve=None if reader is None else self._server(t, parts, reader),
                    group=group,
                )
            )

    def _server(self, t: int, parts: Sequence[Partition], reader):
        """``serve(ids, out)`` of type ``t``'s store: rows of this rank's parts by one
        planned read (ids in the type's part-by-part numbering)."""
        toff = self._toff[t]
        held = sorted(p.index for p in parts)
        # row of a held part's first node in the stack of the rank's files
        base = np.zeros(self.store.num_parts, np.int64)
        at = 0
        for i in held:
            base[i] = at
            at += int(toff[i + 1] - toff[i])

        def serve(ids: np.ndarray, out: np.ndarray) -> np.ndarray:
            part = owner_of(toff, ids)
            rows = ids - toff[part] + base[part]
            uniq, first, inv = np.unique(rows, return_index=True, return_inverse=True)
            if len(uniq) == len(rows):
                reader.read(uniq, out, dest=first)
                return out
            # a rank asking itself for a row twice (its parts' halos share a node it owns)
            reader.read(uniq, out, dest=first)
            out[:] = out[first[inv.reshape(-1)]]
            return out

        return serve

    def pull(self, tb: TypedBatch) -> list[torch.Tensor | None]:
        """``[rows of the batch's nodes of type t, in batch order]`` per type (None for a
        type without features); ``tb.n_id`` in new ids. Collective: every rank calls it
        once per step."""
        n_id, types = np.asarray(tb.n_id), tb.node_type.numpy()
        b = self.store.type_bounds
        out: list[torch.Tensor | None] = []
        for t, fs in enumerate(self.stores):
            if fs is None:
                out.append(None)
                continue
            ids = n_id[types == t]
            part = owner_of(self.store.part_offsets, ids)
            cid = ids - b[part, t] + self._toff[t][part]
            out.append(fs.pull(cid).clone())
        return out

    def close(self) -> None:
        for r in self.readers:
            if r is not None and hasattr(r, "close"):
                r.close()
