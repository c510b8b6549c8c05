"""A rank's partition for engines that compute on their own nodes and treat the rest as halo
(``hec``, ``fullgraph``): its parts' core nodes merged into one solid set, with their in-edges
in rank-local ids. On a typed store it also carries every entry's relation and every local
node's type (what a sampler over it needs to draw per relation and label its blocks)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shoal.store.reader import Partition
from shoal.utils.arrays import unique_sorted

__all__ = ["RankGraph", "rank_graph"]


@dataclass
class RankGraph:
    """A rank's partition: ``solid`` global ids (its parts' core nodes, part after part),
    ``halo`` sorted global ids of their in-neighbours on other ranks, and the CSR of the
    solid nodes' in-edges in rank-local ids (solid ``0..S-1``, halo ``S + position``).

    A typed store's also has ``edge_types`` (the relation of every entry of ``indices``, the
    parts' ``Partition.edge_types`` concatenated as their CSR entries are: each row grouped
    by relation) and ``node_type`` (the type of every rank-local id, solid then halo); both
    None on an untyped store."""

    solid: np.ndarray
    halo: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    edge_types: np.ndarray | None = None
    node_type: np.ndarray | None = None

    @property
    def num_solid(self) -> int:
        return len(self.solid)

    def to_global(self, local: np.ndarray) -> np.ndarray:
        """Global ids of rank-local ids."""
        local = np.asarray(local, dtype=np.int64)
        out = np.empty(local.shape, dtype=np.int64)
        solid = local < self.num_solid
        out[solid] = self.solid[local[solid]]
        out[~solid] = self.halo[local[~solid] - self.num_solid]
        return out


def rank_graph(
    parts: list[Partition], part_to_rank: np.ndarray, rank: int, owner, store=None
) -> RankGraph:
    """The :class:`RankGraph` of ``parts`` (this rank's). With one part its arrays are the
    part's own (core nodes, then its sorted halo); with several, the parts' CSRs are merged and
    halo nodes held by another of this rank's parts become solid. ``owner(ids)``: part of each
    global id. A typed store's graph carries its relations and node types (:class:`RankGraph`);
    ``store``: the parts' store (default ``parts[0].store``; a rank without parts gets a typed
    empty graph when given a typed one)."""
    g = _rank_graph(parts, part_to_rank, rank, owner)
    store = store if store is not None else parts[0].store if parts else None
    if store is None or store.schema is None:
        return g  # untyped: the arrays as they always were
    g.edge_types = np.concatenate(
        [np.asarray(p.edge_types) for p in parts] or [np.empty(0, np.int64)]
    )
    g.node_type = store.type_of(np.concatenate([g.solid, g.halo])).astype(np.int64)
    return g


def _rank_graph(parts: list[Partition], part_to_rank: np.ndarray, rank: int, owner) -> RankGraph:
    if not parts:
        e = np.empty(0, np.int64)
        return RankGraph(e, e, np.zeros(1, np.int64), e)
    if len(parts) == 1:
        p = parts[0]
        return RankGraph(
            p.core_ids.astype(np.int64),
            np.asarray(p.halo_ids, np.int64),
            np.asarray(p.indptr),
            np.asarray(p.indices),
        )
    solid = np.concatenate([p.core_ids for p in parts]).astype(np.int64)
    offsets = np.cumsum([0] + [p.num_core for p in parts])
    off_of = np.zeros(len(part_to_rank), np.int64)  # part -> its first rank-local id
    start_of = np.zeros(len(part_to_rank), np.int64)  # part -> its first global id
    for p, o in zip(parts, offsets, strict=False):
        off_of[p.index], start_of[p.index] = o, p.start
    halos = np.concatenate([np.asarray(p.halo_ids, np.int64) for p in parts])
    halo = unique_sorted(halos[part_to_rank[owner(halos)] != rank])
    s = len(solid)
    ptrs, idx, base = [np.zeros(1, np.int64)], [], 0
    for p in parts:
        h = np.asarray(p.halo_ids, np.int64)
        q = owner(h)
        mine = part_to_rank[q] == rank  # halo of this part, core of another part here
        local_h = np.where(mine, off_of[q] + h - start_of[q], 0)
        local_h[~mine] = s + np.searchsorted(halo, h[~mine])
        ind = np.asarray(p.indices, np.int64)
        core = ind < p.num_core
        out = np.where(core, off_of[p.index] + ind, 0)
        out[~core] = local_h[ind[~core] - p.num_core]
        idx.append(out)
        ptrs.append(np.asarray(p.indptr, np.int64)[1:] + base)
        base += len(ind)
    return RankGraph(solid, halo, np.concatenate(ptrs), np.concatenate(idx))
