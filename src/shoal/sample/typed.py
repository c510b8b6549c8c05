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
from dataclasses import dataclass, replace

import numpy as np
import torch

from shoal.data.hetero import HeteroSchema
from shoal.graph.blocks import MiniBatch
from shoal.rows.featstore import DiskFeatures
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
    "row_types",
    "typed_batch",
    "typed_cache_choice",
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
    nt = torch.from_numpy(np.asarray(node_type, np.int64))
    types, blocks = [], []
    for blk in mb.blocks:
        ei = blk.edge_index.numpy()
        et = torch.from_numpy(table[node_type[ei[0]], node_type[ei[1]]].astype(np.int64))
        types.append(et)
        blocks.append(replace(blk, edge_type=et, src_type=nt[: blk.num_src]))
    mb = MiniBatch(n_id=mb.n_id if n_id is None else n_id, blocks=blocks, num_seeds=mb.num_seeds)
    return TypedBatch(mb, nt, types)


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
        self.node_type = np.asarray(node_type, np.int64)
        self.row_type = self.node_type.astype(np.int32)
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
        rel = (self.row_type, t.by_dst_ptr, t.by_dst, fan)
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


def row_types(bounds: np.ndarray) -> np.ndarray:
    """int32 node type of every core row of a part, from its type ranges (``T + 1``)."""
    b = np.asarray(bounds, np.int64)
    return np.repeat(np.arange(len(b) - 1, dtype=np.int32), np.diff(b - b[0]))


def typed_cache_choice(
    schema: HeteroSchema, row_bytes: Sequence[int], degrees: np.ndarray, cache_bytes: int
) -> list[tuple[int, np.ndarray]]:
    """Per node type, ``(rows cached, every row of the type by decreasing score)``: the
    ``cache_bytes`` go to the rows of highest ``degrees`` (the in-degree, or any score:
    the trainer passes how many pre-sampled batches need the row, ties by in-degree) over
    all types together (each row costs its own type's ``row_bytes``; 0 for a type without
    features, which caches nothing), as the untyped static cache does for one matrix
    (:mod:`shoal.rows.featstore`)."""
    order = np.argsort(-np.asarray(degrees, np.int64), kind="stable")
    t_of = schema.type_of(order)
    rb = np.asarray(row_bytes, np.int64)[t_of]
    k = int(np.searchsorted(np.cumsum(rb), int(cache_bytes), side="right"))
    out = []
    for t, nt in enumerate(schema.node_types):
        mine = t_of == t
        k_t = int(np.count_nonzero(mine[:k])) if row_bytes[t] else 0
        out.append((k_t, order[mine] - nt.offset))
    return out


class TypedFeatures:
    """Each node type's feature rows of a typed batch under a memory budget: a static cache
    of the rows of highest in-degree over all types (``cache_bytes``,
    :func:`typed_cache_choice`) and, for the rest, one planned direct read per type and batch
    (:class:`~shoal.rows.featstore.DiskFeatures`: sorted, coalesced, ``O_DIRECT``; never the
    page cache). ``graph``: a typed :class:`GraphDir`; ``degrees``: its in-degrees (needed
    when ``cache_bytes`` > 0).

    :meth:`io` gives the rows and bytes read since the last call against the distinct rows
    the batches needed (the bytes an epoch needed)."""

    def __init__(
        self,
        graph,
        *,
        cache_bytes: int = 0,
        degrees: np.ndarray | None = None,
        threads: int = 8,
        show_progress: bool | None = None,
    ) -> None:
        self.schema = graph.schema
        xs = [graph.node_features(t.name) for t in self.schema.node_types]
        row_bytes = [0 if x is None else int(x.shape[1]) * x.dtype.itemsize for x in xs]
        if cache_bytes > 0 and degrees is None:
            raise ValueError("a feature cache needs the in-degrees to choose its rows")
        choice = (
            typed_cache_choice(self.schema, row_bytes, degrees, cache_bytes)
            if cache_bytes > 0
            else [(0, None)] * len(xs)
        )
        self.stores: list[DiskFeatures | None] = []
        self._seen: list[np.ndarray | None] = []
        for x, rb, (k, prio) in zip(xs, row_bytes, choice, strict=True):
            if x is None:
                self.stores.append(None)
                self._seen.append(None)
                continue
            self.stores.append(
                DiskFeatures(
                    x,
                    cache_bytes=k * rb,
                    priority=prio,
                    threads=threads,
                    show_progress=show_progress,
                )
            )
            self._seen.append(np.zeros(x.shape[0], bool))
        self._last = [None if f is None else f.stats.snapshot() for f in self.stores]

    @property
    def cache_bytes(self) -> int:
        return sum(f.cache_bytes for f in self.stores if f is not None)

    def gather(self, tb: TypedBatch) -> list[torch.Tensor | None]:
        """``[rows of the batch's nodes of type t, in batch order]`` per type (None for a
        type without features); fresh tensors."""
        n_id, types = np.asarray(tb.n_id), tb.node_type.numpy()
        out: list[torch.Tensor | None] = []
        for t, (nt, fs) in enumerate(zip(self.schema.node_types, self.stores, strict=True)):
            if fs is None:
                out.append(None)
                continue
            ids = n_id[types == t] - nt.offset
            self._seen[t][ids] = True
            out.append(fs.gather(ids).clone())
        return out

    def io(self) -> dict[str, int]:
        """Rows requested and served by the cache, rows and bytes read, and the distinct
        rows (and their bytes) the batches needed, since the last call."""
        rec = dict.fromkeys(("requested", "hits", "rows_read", "bytes_read"), 0)
        rec["read_seconds"] = 0.0
        rec["unique_rows"] = rec["unique_bytes"] = 0
        for t, fs in enumerate(self.stores):
            if fs is None:
                continue
            now = fs.stats.snapshot()
            for k in ("requested", "hits", "rows_read", "bytes_read", "read_seconds"):
                rec[k] += now[k] - self._last[t][k]
            self._last[t] = now
            u = int(np.count_nonzero(self._seen[t]))
            rec["unique_rows"] += u
            rec["unique_bytes"] += u * fs.row_bytes
            self._seen[t][:] = False
        return rec

    def release_cache(self) -> int:
        """Give the caches' memory back (every row read from its file from now on)."""
        return sum(fs.release_cache() for fs in self.stores if fs is not None)

    def close(self) -> None:
        for fs in self.stores:
            if fs is not None:
                fs.close()
