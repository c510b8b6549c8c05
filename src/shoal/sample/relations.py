"""A typed graph's relations as a sampler sees them: a fanout per relation, typed blocks.

Every sampler of shoal takes an optional :class:`~shoal.data.hetero.HeteroSchema` and then
draws each hop's fanout *per relation*, as DGL's ``sample_neighbors`` and PyG's
``NeighborLoader`` do on a heterogeneous graph. :class:`RelationDraws` runs the per-relation
kernels (:mod:`shoal.sample._typed_kernels`) on a graph's in-CSR over global ids
(``by_range``) or on a typed store part's local CSR (``by_edge_type``, each row's in-edges
grouped by relation); both draw the same runs from the same stream, so a one-part store
samples as its graph does. A schema with a single relation takes the untyped kernels
(bit-identical batches) and only labels the blocks with their edges' relations and sources'
node types (:meth:`RelationDraws.label`), as PyG's ``RGCNConv`` reads them
(docs/distributed.md#typed-stores-every-engine).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from shoal.data.hetero import HeteroSchema
from shoal.graph.blocks import MiniBatch
from shoal.sample import _typed_kernels as TK
from shoal.sample.base import parse_fanouts

__all__ = ["RelationDraws", "RelationTables", "label_blocks", "row_types"]

#: no excluded edges: no keys (the kernels then draw every run whole)
_NO_EX = (np.empty(0, np.int64), np.int64(1))
#: no node type per row: a graph's in-CSR, whose node types are the schema's id ranges
_NO_TYPES = np.empty(0, np.int32)


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


def row_types(bounds: np.ndarray) -> np.ndarray:
    """int32 node type of every core row of a part, from its type ranges (``T + 1``)."""
    b = np.asarray(bounds, np.int64)
    return np.repeat(np.arange(len(b) - 1, dtype=np.int32), np.diff(b - b[0]))


def label_blocks(pair: np.ndarray, mb: MiniBatch, node_type: np.ndarray) -> MiniBatch:
    """``mb`` with every block's ``src_type`` (its sources' types, from ``node_type`` of the
    batch's nodes) and ``edge_type`` (each edge's relation from its endpoints' types: the
    ``(T, T)`` table ``pair``, one relation per ordered type pair)."""
    nt = np.asarray(node_type, np.int64)
    types = torch.from_numpy(nt)
    blocks = []
    for blk in mb.blocks:
        ei = blk.edge_index.numpy()
        et = torch.from_numpy(pair[nt[ei[0]], nt[ei[1]]].astype(np.int64, copy=False))
        blocks.append(replace(blk, edge_type=et, src_type=types[: blk.num_src]))
    return MiniBatch(n_id=mb.n_id, blocks=blocks, num_seeds=mb.num_seeds)


class RelationDraws:
    """A sampler's per-relation draws (module docstring).

    Args:
        schema: the graph's node types and relations; every ordered (source type,
            destination type) pair has at most one relation (refused otherwise, naming them).
        fanouts: per hop, the neighbours drawn for *each* relation (-1: all).
        relation_fanouts: per relation name (or ``"src__relation__dst"``), its own per-hop
            fanouts, overriding ``fanouts`` for it (default none).

    :attr:`per_relation` is false for a single relation: the sampler then draws with the
    untyped kernels (the same streams) and only labels the blocks. A sampler sets
    :attr:`hop` before each hop's draws."""

    def __init__(
        self,
        schema: HeteroSchema,
        fanouts: Sequence[int],
        relation_fanouts: Mapping[str, Sequence[int] | str] | None = None,
    ) -> None:
        self.schema = schema
        self.pair = schema.pair_relations()
        self.offsets = schema.offsets
        self.tables = RelationTables.of(schema, fanouts, relation_fanouts)
        self.per_relation = len(schema.edge_types) > 1 or bool(relation_fanouts)
        self.hop = 0
        st, r = self.tables.src_type, np.arange(len(schema.edge_types), dtype=np.int64)
        # each relation's run: its source type's id range, or its own edge type
        self._by_range = (self.offsets[st], self.offsets[st + 1])
        self._by_edge_type = (r, r + 1)

    def _rel(self, bounds: tuple) -> tuple:
        t = self.tables
        return (t.by_dst_ptr, t.by_dst, *bounds, t.fanouts[self.hop])

    def count_by_range(self, indptr, indices, nodes, n: int, counts, ex=None) -> None:
        """``counts[i]``: draws of ``nodes[i]`` (global ids) from a graph's in-CSR; ``ex``:
        ``(sorted dst * n_ids + src keys, n_ids)`` of edges to skip, or None."""
        rel = self._rel(self._by_range)
        args = (indptr, indices, indices, nodes, n, self.offsets, _NO_TYPES, *rel)
        TK._count(*args, *(ex or _NO_EX), counts)

    def fill_by_range(
        self, indptr, indices, nodes, n: int, rowptr, key, picked, dst, ex=None
    ) -> None:
        """Each relation's draws of ``nodes[i]`` into ``picked[rowptr[i]:]`` (global ids)."""
        rel = self._rel(self._by_range)
        args = (indptr, indices, indices, nodes, n, self.offsets, _NO_TYPES, *rel)
        TK._fill(*args, rowptr, key, picked, dst, *(ex or _NO_EX))

    def count_by_edge_type(
        self, indptr, etypes, row_type, rows, n: int, counts, ex=None, indices=None
    ) -> None:
        """:meth:`count_by_range` of a part's local rows ``rows`` (in-edges grouped by
        relation, ``etypes``; ``row_type`` the type of every local row; keys over local ids;
        ``indices``, the rows' entries, needed with ``ex``)."""
        if indices is None:  # (read only for excluded entries)
            indices = _NO_EX[0]
        rel = self._rel(self._by_edge_type)
        args = (indptr, indices, etypes, rows, n, self.offsets, row_type, *rel)
        TK._count(*args, *(ex or _NO_EX), counts)

    def fill_by_edge_type(
        self, indptr, indices, etypes, row_type, rows, n: int, rowptr, key, picked, dst, ex=None
    ) -> None:
        """:meth:`fill_by_range` of a part's local rows (``picked`` gets local indices)."""
        rel = self._rel(self._by_edge_type)
        args = (indptr, indices, etypes, rows, n, self.offsets, row_type, *rel)
        TK._fill(*args, rowptr, key, picked, dst, *(ex or _NO_EX))

    def label(self, mb: MiniBatch, node_type: np.ndarray) -> MiniBatch:
        """:func:`label_blocks` of ``mb`` whose nodes have the types ``node_type``."""
        return label_blocks(self.pair, mb, node_type)
