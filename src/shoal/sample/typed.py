"""Neighbour sampling on a typed graph: a fanout per relation, typed blocks.

DGL's ``sample_neighbors`` and PyG's ``NeighborLoader`` on a heterogeneous graph draw each
hop's fanout *per edge type*: a paper gets up to ``k`` citing papers and up to ``k`` authors,
not ``k`` neighbours of any kind. :class:`TypedNeighborSampler` does the same on shoal's typed
graphs (one global id space, :mod:`shoal.data.hetero`): in the in-CSR, a node's in-neighbours
of one source type are a contiguous run of its sorted row, and where every (source type,
destination type) pair has one relation (ogbn-mag, IGBH, most typed graphs;
:meth:`~shoal.data.hetero.HeteroSchema.pair_relations`) that run is the relation's neighbour
list. No per-edge relation array is read: a sampled edge's relation is its endpoints' types.

Output: the untyped sampler's :class:`~shoal.graph.blocks.MiniBatch` (global ``n_id``, one
block per layer, targets first) and, per block, the relation of each edge
(:class:`TypedBatch`); a relational layer reads ``edge_type`` beside ``edge_index``, as PyG's
``RGCNConv`` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from shoal.data.hetero import HeteroSchema
from shoal.graph.blocks import MiniBatch
from shoal.rows.opener import open_rows
from shoal.sample import _typed_kernels as TK
from shoal.sample.base import hop_rowptr, parse_fanouts
from shoal.sample.sampler import NeighborSampler

__all__ = [
    "PartTypedSampler",
    "RelationTables",
    "TypedBatch",
    "TypedFeatures",
    "TypedNeighborSampler",
    "edge_types_of",
    "typed_batch",
]


@dataclass
class TypedBatch:
    """A sampled batch of a typed graph: the untyped ``batch``, each node's type index
    (``node_type``, ``(len(n_id),)`` int64) and each block's ``(E,)`` int64 relations."""

    batch: MiniBatch
    node_type: torch.Tensor
    edge_types: list[torch.Tensor]

    @property
    def n_id(self) -> np.ndarray:
        """Global ids of the batch's nodes, seeds first (int64)."""
        return self.batch.n_id

    @property
    def blocks(self) -> list:
        return self.batch.blocks


def edge_types_of(schema: HeteroSchema, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The relation index of each edge ``src[i] -> dst[i]`` (global ids) from its endpoints'
    types (:meth:`HeteroSchema.pair_relations`); -1 where no relation joins those types."""
    table = schema.pair_relations()
    return table[schema.type_of(src), schema.type_of(dst)]


@dataclass
class RelationTables:
    """What a typed sampler draws by, per relation: its source type (``src_type``, ``(R,)``),
    the relations into each node type (``by_dst[by_dst_ptr[t]:by_dst_ptr[t + 1]]``, in
    relation order) and each hop's fanout of each relation (``fanouts``, ``(hops, R)``)."""

    src_type: np.ndarray
    by_dst_ptr: np.ndarray
    by_dst: np.ndarray
    fanouts: np.ndarray

    @classmethod
    def of(
        cls,
        schema: HeteroSchema,
        fanouts: Sequence[int],
        relation_fanouts: Mapping[str, Sequence[int] | str] | None = None,
    ) -> RelationTables:
        """``fanouts``: per hop, for every relation; ``relation_fanouts``: per relation name
        (or ``"src__relation__dst"``), its own per-hop fanouts."""
        names = schema.type_names
        rels = schema.edge_types
        src_type = np.array([names.index(e.src) for e in rels], np.int64)
        dst_type = np.array([names.index(e.dst) for e in rels], np.int64)
        by_dst = np.argsort(dst_type, kind="stable").astype(np.int64)
        by_dst_ptr = np.zeros(len(names) + 1, np.int64)
        np.cumsum(np.bincount(dst_type, minlength=len(names)), out=by_dst_ptr[1:])
        hops = len(fanouts)
        fan = np.tile(np.asarray(fanouts, np.int64)[:, None], (1, len(rels)))
        for name, f in (relation_fanouts or {}).items():
            per = parse_fanouts(f)
            if len(per) != hops:
                raise ValueError(
                    f"relation {name!r} has {len(per)} fanouts, the sampler {hops} hops"
                )
            parts = name.split("__")
            fan[:, schema.relation_index(tuple(parts) if len(parts) == 3 else name)] = per
        return cls(src_type, by_dst_ptr, by_dst, fan)


def typed_batch(
    schema: HeteroSchema, mb: MiniBatch, node_type: np.ndarray, n_id: np.ndarray | None = None
) -> TypedBatch:
    """A :class:`TypedBatch` of ``mb`` whose nodes have types ``node_type``: each block
    edge's relation from its endpoints' types (one relation per type pair); ``n_id``
    replaces the batch's ids (a store's batch passes the original ids)."""
    table = schema.pair_relations()
    types = []
    for blk in mb.blocks:
        ei = blk.edge_index.numpy()
        types.append(torch.from_numpy(table[node_type[ei[0]], node_type[ei[1]]].astype(np.int64)))
    if n_id is not None:
        mb = MiniBatch(n_id=n_id, blocks=mb.blocks, num_seeds=mb.num_seeds)
    return TypedBatch(mb, torch.from_numpy(np.asarray(node_type, np.int64)), types)


class TypedNeighborSampler(NeighborSampler):
    """Per-relation uniform neighbour sampling over a typed graph's in-CSR (global ids,
    sorted neighbour lists: ``GraphDir.csr("in")``).

    Args:
        indptr, indices: the in-CSR (memory maps are fine; ``indices`` is read in place).
        schema: the graph's node types and relations; every (source type, destination type)
            pair must have at most one relation.
        fanouts: per hop (hop 1 first, as PyG's ``num_neighbors``), the neighbours drawn for
            *each* relation; -1 takes all.
        relation_fanouts: per relation name (or ``"src__relation__dst"``), its own per-hop
            fanouts, overriding ``fanouts`` for that relation (default none).
        degrees: full in-degrees (default the CSR's row lengths).

    ``sample(seeds, seed)`` returns a :class:`TypedBatch`; the draws depend only on the
    seed. Not safe to share between threads (reused buffers)."""

    def __init__(
        self,
        indptr: np.ndarray,
        indices: np.ndarray,
        schema: HeteroSchema,
        fanouts: Sequence[int] | str,
        *,
        relation_fanouts: Mapping[str, Sequence[int] | str] | None = None,
        degrees: np.ndarray | None = None,
    ) -> None:
        super().__init__(indptr, indices, fanouts, num_nodes=schema.num_nodes, degrees=degrees)
        self.schema = schema
        schema.pair_relations()  # refuses a schema with two relations between one type pair
        self._offsets = schema.offsets
        self.tables = RelationTables.of(schema, self.fanouts, relation_fanouts)
        self.relation_fanout_table = self.tables.fanouts  # (hops, R)
        self._hop = 0

    def sample(
        self,
        seeds: np.ndarray | torch.Tensor,
        seed: int = 0,
        *,
        fanouts: Sequence[int] | None = None,
        exclude: np.ndarray | torch.Tensor | None = None,
    ) -> TypedBatch:
        """A :class:`TypedBatch` of ``seeds``; ``fanouts`` must be None (the sampler's, per
        relation) and ``exclude`` is not supported yet."""
        if fanouts is not None or exclude is not None:
            raise ValueError("the typed sampler takes its fanouts per relation, and no exclude")
        self._hop = 0
        mb = super().sample(seeds, seed)
        return typed_batch(self.schema, mb, self.schema.type_of(np.asarray(mb.n_id)))

    def _draw_hop(
        self, n: int, fanout: int, key: np.uint64, exclude: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One hop (:meth:`BlockSampler._draw_hop`), each relation with its own fanout."""
        fan = self.relation_fanout_table[self._hop]
        self._hop += 1
        counts = self._grow("_counts", n)
        args = (self.indptr, self.indices, self._nodes, n, self._offsets)
        rel = (self.tables.by_dst_ptr, self.tables.by_dst, self.tables.src_type, fan)
        TK._count(*args, *rel, counts)
        rowptr = hop_rowptr(counts, n)
        m = int(rowptr[-1])
        picked = self._grow("_picked", m)
        dst = self._grow("_dst", m)
        TK._fill(*args, *rel, rowptr, key, picked, dst)
        return rowptr, picked, dst


class PartTypedSampler(NeighborSampler):
    """Per-relation sampling inside one part of a typed store (local indices: core rows,
    then halo nodes, which have no rows here): the local training of the ``averaging``
    engine. Each row's in-edges are grouped by relation (``part.edge_types``), so a
    relation's run is found by two binary searches; with one part the draws equal
    :class:`TypedNeighborSampler`'s on the graph (same runs, same streams).

    Args:
        part: a :class:`~shoal.store.Partition` of a typed store.
        node_type: ``(num_core + num_halo,)`` type index of every local node.
        fanouts, relation_fanouts: as :class:`TypedNeighborSampler`'s.
        degrees: full in-degrees of the local nodes (default the part's row lengths).

    ``sample`` returns a :class:`TypedBatch` over local indices."""

    def __init__(
        self,
        part,
        node_type: np.ndarray,
        fanouts: Sequence[int] | str,
        *,
        relation_fanouts: Mapping[str, Sequence[int] | str] | None = None,
        degrees: np.ndarray | None = None,
    ) -> None:
        super().__init__(
            part.indptr, part.indices, fanouts, num_nodes=part.num_nodes, degrees=degrees
        )
        self.schema = part.store.schema
        self.schema.pair_relations()  # the typed blocks' relations come from the type pairs
        self.edge_types = np.asarray(part.edge_types)
        self.bounds = np.asarray(part.type_bounds, np.int64)
        self.node_type = np.asarray(node_type, np.int64)
        self.tables = RelationTables.of(self.schema, self.fanouts, relation_fanouts)
        self._hop = 0

    def sample(self, seeds, seed: int = 0, **kw) -> TypedBatch:
        """A :class:`TypedBatch` of the local ``seeds`` (core rows)."""
        if kw.get("fanouts") is not None or kw.get("exclude") is not None:
            raise ValueError("the typed sampler takes its fanouts per relation, and no exclude")
        self._hop = 0
        mb = super().sample(seeds, seed)
        return typed_batch(self.schema, mb, self.node_type[np.asarray(mb.n_id)])

    def _draw_hop(
        self, n: int, fanout: int, key: np.uint64, exclude: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        fan = self.tables.fanouts[self._hop]
        self._hop += 1
        counts = self._grow("_counts", n)
        t = self.tables
        rel = (self.bounds, t.by_dst_ptr, t.by_dst, fan)
        TK._count_rel(self.indptr, self.edge_types, self._nodes, n, *rel, counts)
        rowptr = hop_rowptr(counts, n)
        m = int(rowptr[-1])
        picked = self._grow("_picked", m)
        dst = self._grow("_dst", m)
        TK._fill_rel(
            self.indptr,
            self.indices,
            self.edge_types,
            self._nodes,
            n,
            *rel,
            rowptr,
            key,
            picked,
            dst,
        )
        return rowptr, picked, dst


class TypedFeatures:
    """Each node type's feature rows of a typed batch, read from the type's own file with
    planned direct reads (:func:`~shoal.rows.opener.open_rows`: sorted, coalesced,
    ``O_DIRECT``; never the page cache). ``graph``: a typed :class:`GraphDir`."""

    def __init__(self, graph) -> None:
        self.schema = graph.schema
        self.readers = []
        for t in self.schema.node_types:
            x = graph.node_features(t.name)
            self.readers.append(None if x is None else (x, open_rows(x)))

    def gather(self, tb: TypedBatch) -> list[torch.Tensor | None]:
        """``[rows of the batch's nodes of type t, in batch order]`` per type (None for a
        type without features)."""
        n_id, types = np.asarray(tb.n_id), tb.node_type.numpy()
        out: list[torch.Tensor | None] = []
        for t, (nt, rd) in enumerate(zip(self.schema.node_types, self.readers, strict=True)):
            if rd is None:
                out.append(None)
                continue
            x, reader = rd
            ids = n_id[types == t] - nt.offset
            order = np.argsort(ids, kind="stable")
            rows = np.empty((len(ids), x.shape[1]), np.float32)
            if len(ids) and reader is not None:
                got = np.empty_like(rows)
                reader.read(ids[order], got)
                rows[order] = got
            elif len(ids):
                rows[:] = x[ids]
            out.append(torch.from_numpy(rows))
        return out

    def close(self) -> None:
        for rd in self.readers:
            if rd is not None and rd[1] is not None:
                rd[1].close()
