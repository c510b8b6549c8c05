"""Deeper halos for local training (``--halo-hops H``): a part's halo nodes' own in-edges,
fetched once before training.

A stored part is SDT-GNN's (Sec. III-B): every core node with its full in-neighbourhood,
and the halo nodes it reaches, with their features (``--halo-features``) but none of their
own in-edges. A model of ``L`` layers trained on the part alone therefore sees a halo node
without its neighbours from its second layer on, while the evaluation (and the engines that
sample across ranks) see them: on a typed IGBH-shaped graph that is most of R-GAT's gap
between ``averaging`` and ``minibatch`` (docs/distributed.md#typed-stores-minibatch-averaging).

With ``halo_hops`` ``H > 1`` (DGL's ``partition_graph(..., num_hops=H)``, done at load time
here instead of in the stored part), each rank asks the owners, once, for every in-edge
(all relations) of its parts' halo nodes, ``H - 1`` hops deep, and for the feature rows of
the nodes those edges reach. They are written to the run's scratch directory (never held
whole in memory), the part's own CSR copied ahead of them, and training stays local:
nothing is communicated during an epoch. With ``H`` at least the model's layers, every
neighbourhood sampled from a core node is the graph's, as the ``minibatch`` engine's.
Costs: one exchange of the grown nodes' in-edges and rows before the first epoch, and
their bytes on disk and in the sampler's id maps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from shoal.graph.blocks import MiniBatch
from shoal.sample.typed import TypedBatch
from shoal.store._io import NpyAppender
from shoal.store.reader import Partition

__all__ = ["GrownPart", "grow_parts"]

#: the most in-edges asked for in one exchange step (their seeds' full in-degrees summed)
STEP_EDGES = 1 << 20
#: the most feature rows pulled in one exchange step
STEP_ROWS = 1 << 15


class GrownPart:
    """A part with deeper halos, read as :class:`~shoal.sample.typed.PartTypedSampler` reads
    a :class:`~shoal.store.Partition`: local ids are the part's (core, halo), then the
    nodes reached from the halo (``ids``: their new ids in local order); ``indptr`` has rows
    for every node less than ``H`` hops from the core; ``extra[t]``: the rows of type ``t``
    of the reached nodes, in local order (None for a type without features)."""

    def __init__(
        self,
        part: Partition,
        ids: np.ndarray,
        indptr: np.ndarray,
        indices: np.ndarray,
        edge_types: np.ndarray,
        extra: list[np.ndarray | None],
    ) -> None:
        self.part, self.store, self.index = part, part.store, part.index
        self.ids = ids
        self.indptr, self.indices, self.edge_types = indptr, indices, edge_types
        self.extra = extra
        self.num_core = part.num_core
        self.num_stored = part.num_nodes  # core + the stored halo
        self.num_nodes = int(len(ids))
        self.node_type = self.store.type_of(ids).astype(np.int64)
        self.orig_ids = self.store.to_orig(ids)

    @property
    def num_grown(self) -> int:
        """Nodes beyond the stored part's."""
        return self.num_nodes - self.num_stored


class _Growing:
    """One part while it grows: its local ids, and its new rows spooled to ``work``."""

    def __init__(self, part: Partition, work: Path, chunk: int) -> None:
        self.part = part
        self.ids = [np.arange(part.start, part.start + part.num_core, dtype=np.int64)]
        self.ids.append(np.asarray(part.halo_ids, np.int64))
        known = np.concatenate(self.ids)
        order = np.argsort(known, kind="stable")
        self.sorted_ids, self.sorted_local = known[order], order.astype(np.int64)
        self.n = int(len(known))
        self.frontier = (part.num_core, self.n)  # the nodes whose rows come next
        self.indptr = [np.asarray(part.indptr, np.int64)]
        self.work = work
        self.etype = np.asarray(part.edge_types[:0]).dtype
        self.spool_i = open(work / f"grow_{part.index}_indices.bin", "wb")
        self.spool_r = open(work / f"grow_{part.index}_types.bin", "wb")
        e = int(self.indptr[0][-1])
        for a in range(0, e, chunk):  # the stored rows first
            b = min(e, a + chunk)
            read_rows_to(part.indices, a, b, np.int64).tofile(self.spool_i)
            read_rows_to(part.edge_types, a, b, self.etype).tofile(self.spool_r)
        self.num_edges = e

    def local(self, g: np.ndarray) -> np.ndarray:
        """Local ids of the new ids ``g``, numbering the unseen ones next (in id order)."""
        pos = np.searchsorted(self.sorted_ids, g)
        pos[pos == len(self.sorted_ids)] = 0
        seen = self.sorted_ids[pos] == g if len(self.sorted_ids) else np.zeros(len(g), bool)
        new = np.unique(g[~seen])
        if len(new):
            self.ids.append(new)
            ids = np.concatenate([self.sorted_ids, new])
            loc = np.concatenate([self.sorted_local, self.n + np.arange(len(new))])
            order = np.argsort(ids, kind="stable")
            self.sorted_ids, self.sorted_local = ids[order], loc[order]
            self.n += len(new)
        pos = np.searchsorted(self.sorted_ids, g)
        return self.sorted_local[pos]

    def add_rows(self, counts: np.ndarray, src: np.ndarray, rel: np.ndarray) -> None:
        """The next frontier nodes' in-edges: ``counts`` per node, sources as new ids."""
        self.local(src).astype(np.int64).tofile(self.spool_i)
        rel.astype(self.etype).tofile(self.spool_r)
        self.indptr.append(self.indptr[-1][-1] + np.cumsum(counts, dtype=np.int64))
        self.num_edges += int(len(src))

    def finish(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        self.spool_i.close()
        self.spool_r.close()
        e, i = self.num_edges, self.part.index
        if e:
            indices = np.memmap(self.work / f"grow_{i}_indices.bin", np.int64, "r", 0, (e,))
            etypes = np.memmap(self.work / f"grow_{i}_types.bin", self.etype, "r", 0, (e,))
        else:
            indices, etypes = np.empty(0, np.int64), np.empty(0, self.etype)
        return np.concatenate(self.ids), np.concatenate(self.indptr), indices, etypes


def read_rows_to(a: Any, lo: int, hi: int, dtype: Any) -> np.ndarray:
    """``a[lo:hi]`` of an array or a memory-mapped file, as ``dtype``."""
    return np.asarray(a[lo:hi]).astype(dtype, copy=False)


def _any_left(mine: bool, world: int) -> bool:
    """Whether any rank has work left (collective)."""
    t = torch.tensor([float(mine)], dtype=torch.float64)
    if world > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def _chunks(ids: np.ndarray, weight: np.ndarray, cap: int) -> list[np.ndarray]:
    """``ids`` cut in consecutive runs of total ``weight`` at most ``cap`` (at least one id)."""
    out, a = [], 0
    c = np.cumsum(weight, dtype=np.int64)
    while a < len(ids):
        base = int(c[a - 1]) if a else 0
        b = max(a + 1, int(np.searchsorted(c, base + cap, side="right")))
        out.append(ids[a:b])
        a = b
    return out


def grow_parts(
    parts: list[Partition],
    hops: int,
    *,
    sampler: Any,
    pulls: Any,
    tables: Any,
    work: Path,
    world_size: int,
    step_edges: int = STEP_EDGES,
    step_rows: int = STEP_ROWS,
) -> list[GrownPart]:
    """Every part of this rank grown by ``hops - 1`` hops of halo (module docstring).
    Collective: every rank calls it with the same ``hops``. ``sampler``: a one-hop
    :class:`~shoal.distributed.typed.DistTypedSampler` with fanout -1 (every in-edge);
    ``pulls``: a :class:`~shoal.distributed.typed.DistTypedFeatures`; ``tables``: the
    engine's :class:`~shoal.distributed.tables.NodeTables` (the grown nodes' degrees are
    added to them); ``work``: a scratch directory for the grown rows."""
    growing = [_Growing(p, work, step_edges) for p in parts]
    for _ in range(max(0, int(hops) - 1)):
        steps = []
        for k, g in enumerate(growing):
            lo, hi = g.frontier
            ids = np.concatenate(g.ids)[lo:hi]
            deg = np.asarray(tables.degrees[ids], np.int64) if len(ids) else ids
            steps += [(k, c) for c in _chunks(ids, deg, step_edges)]
        at, ends = 0, [g.frontier[1] for g in growing]
        while _any_left(at < len(steps), world_size):
            k, seeds = steps[at] if at < len(steps) else (None, np.empty(0, np.int64))
            tb = sampler.sample(seeds)
            at += 1
            if k is None or not len(seeds):
                continue
            blk = tb.blocks[0]
            n_id = np.asarray(tb.n_id)
            dst = blk.edge_index[1].numpy()
            rel = tb.edge_types[0].numpy()
            order = np.lexsort((rel, dst))  # rows by seed, each row's in-edges by relation
            counts = np.bincount(dst, minlength=len(seeds))
            src = n_id[blk.edge_index[0].numpy()[order]]
            growing[k].add_rows(counts, src, rel[order])
        new = []
        for g, end in zip(growing, ends, strict=True):
            g.frontier = (end, g.n)  # the nodes first reached by this hop
            new.append(np.concatenate(g.ids)[g.frontier[0] : g.n])
        tables.hold(np.concatenate(new) if new else np.empty(0, np.int64))  # collective
    out = []
    finished = [g.finish() for g in growing]
    extras = _pull_rows(parts, finished, pulls, work, world_size, step_rows)
    for p, (ids, indptr, indices, etypes), extra in zip(parts, finished, extras, strict=True):
        out.append(GrownPart(p, ids, indptr, indices, etypes, extra))
    return out


def _pull_rows(
    parts: list[Partition],
    finished: list[tuple[np.ndarray, ...]],
    pulls: Any,
    work: Path,
    world: int,
    step_rows: int,
) -> list[list[np.ndarray | None]]:
    """Every grown node's feature rows, per part and type, pulled from their owners in steps
    of ``step_rows`` and written to ``work``; returns them memory-mapped."""
    store = parts[0].store if parts else None
    dims = store.type_feature_dims if store is not None else {}
    names = [t.name for t in store.schema.node_types] if store is not None else []
    steps, writers = [], []
    for k, (p, f) in enumerate(zip(parts, finished, strict=True)):
        grown = f[0][p.num_nodes :]
        types = store.type_of(grown) if len(grown) else grown
        w = {}
        for t, name in enumerate(names):
            if name in dims:
                n_t = int(np.count_nonzero(types == t))
                path = work / f"grow_{p.index}_{name}.npy"
                w[t] = (NpyAppender(path, np.float32, (n_t, dims[name])), path)
        writers.append(w)
        steps += [(k, grown[a : a + step_rows]) for a in range(0, len(grown), step_rows)]
    at = 0
    while _any_left(at < len(steps), world):
        k, ids = steps[at] if at < len(steps) else (None, np.empty(0, np.int64))
        at += 1
        types = store.type_of(ids) if store is not None and len(ids) else ids
        tb = TypedBatch(MiniBatch(ids, [], 0), torch.as_tensor(types, dtype=torch.int64), [])
        rows = pulls.pull(tb)
        if k is None:
            continue
        for t, (wr, _) in writers[k].items():
            if rows[t] is not None and len(rows[t]):
                wr.append(rows[t].numpy())
    out = []
    for w in writers:
        extra: list[np.ndarray | None] = [None] * len(names)
        for t, (wr, path) in w.items():
            wr.close()
            extra[t] = np.load(path, mmap_mode="r") if wr.shape[0] else np.load(path)
        out.append(extra)
    return out
