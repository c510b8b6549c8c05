"""Deeper halos for local training (``--halo-hops H``): a part's halo nodes' own in-edges,
fetched once before training.

A stored part is SDT-GNN's (Sec. III-B): its halo nodes come without their own in-edges. With
``H > 1`` (DGL's ``partition_graph(..., num_hops=H)``, done at load time here) each rank asks
the owners once for every in-edge of its parts' halo nodes, ``H - 1`` hops deep, and for the
rows of the nodes they reach, written to the run's scratch directory; a grown part is trained
as a stored one with more rows (:meth:`GrownPart.rows`) and more halo in-edges. Why and at
what cost: docs/distributed.md#typed-stores-every-engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from shoal.rows.opener import open_rows
from shoal.rows.parts import part_rows
from shoal.rows.source import RowSource
from shoal.store._io import NpyAppender
from shoal.store.reader import Partition
from shoal.utils.arrays import unique_sorted

__all__ = ["GrownPart", "grow_parts"]

#: the most in-edges asked for in one exchange step (their seeds' full in-degrees summed)
STEP_EDGES = 1 << 20
#: the most feature rows pulled in one exchange step
STEP_ROWS = 1 << 15
#: the most bytes of feature rows pulled in one exchange step (16 MiB: 2048 rows of 8 KiB;
#: 32768 such rows are 256 MiB of anonymous memory, twice over with the exchange's buffers)
STEP_BYTES = 16 << 20


class GrownPart:
    """A part with deeper halos, sampled as a :class:`~shoal.store.Partition` is: local ids
    are the part's (core, halo), then the nodes reached from the halo (``ids``: their new
    ids in local order); ``indptr`` has rows for every node less than ``H`` hops from the
    core, ``indices`` local ids, ``edge_types`` (a typed store; None untyped) each entry's
    relation, every row grouped by relation; ``extra``: the reached nodes' input rows in
    local order (a typed store's padded to the widest type; None without features)."""

    def __init__(
        self,
        part: Partition,
        ids: np.ndarray,
        indptr: np.ndarray,
        indices: np.ndarray,
        edge_types: np.ndarray | None,
        extra: np.ndarray | None,
    ) -> None:
        self.part, self.store, self.index = part, part.store, part.index
        self.ids = ids
        self.indptr, self.indices, self.edge_types = indptr, indices, edge_types
        self.extra = extra
        self.num_core = part.num_core
        self.num_stored = part.num_nodes  # core + the stored halo
        self.num_nodes = int(len(ids))
        typed = self.store.schema is not None
        #: every local node's type (a typed store; None untyped)
        self.node_type = self.store.type_of(ids).astype(np.int64) if typed else None

    @property
    def num_grown(self) -> int:
        """Nodes beyond the stored part's."""
        return self.num_nodes - self.num_stored

    @property
    def orig_ids(self) -> np.ndarray:
        """The original ids of the local nodes."""
        return self.store.to_orig(self.ids)

    def rows(self, threads: int = 8) -> RowSource | None:
        """Every local node's input rows as one row source: the stored part's core and halo
        rows (:func:`~shoal.rows.parts.part_rows`), then the grown nodes' from the scratch
        directory; None when the store has no features."""
        stored = part_rows(self.part, halo=True, threads=threads)
        if stored is None or self.extra is None or not len(self.extra):
            return stored
        return open_rows([stored, self.extra], threads=threads)


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
        etypes = part.edge_types  # None on an untyped store: no relations to keep
        self.etype = None if etypes is None else np.asarray(etypes[:0]).dtype
        self.spool_i = open(work / f"grow_{part.index}_indices.bin", "wb")
        self.spool_r = (
            open(work / f"grow_{part.index}_types.bin", "wb") if self.etype is not None else None
        )
        e = int(self.indptr[0][-1])
        for a in range(0, e, chunk):  # the stored rows first
            b = min(e, a + chunk)
            read_rows_to(part.indices, a, b, np.int64).tofile(self.spool_i)
            if self.spool_r is not None:
                read_rows_to(etypes, a, b, self.etype).tofile(self.spool_r)
        self.num_edges = e

    def local(self, g: np.ndarray) -> np.ndarray:
        """Local ids of the new ids ``g``, numbering the unseen ones next (in id order)."""
        pos = np.searchsorted(self.sorted_ids, g)
        pos[pos == len(self.sorted_ids)] = 0
        seen = self.sorted_ids[pos] == g if len(self.sorted_ids) else np.zeros(len(g), bool)
        new = unique_sorted(g[~seen])
        if len(new):
            self.ids.append(new)
            ids = np.concatenate([self.sorted_ids, new])
            loc = np.concatenate([self.sorted_local, self.n + np.arange(len(new))])
            order = np.argsort(ids, kind="stable")
            self.sorted_ids, self.sorted_local = ids[order], loc[order]
            self.n += len(new)
        pos = np.searchsorted(self.sorted_ids, g)
        return self.sorted_local[pos]

    def add_rows(self, counts: np.ndarray, src: np.ndarray, rel: np.ndarray | None) -> None:
        """The next frontier nodes' in-edges: ``counts`` per node, sources as new ids
        (``rel``: their relations, a typed store)."""
        self.local(src).astype(np.int64).tofile(self.spool_i)
        if self.spool_r is not None:
            rel.astype(self.etype).tofile(self.spool_r)
        self.indptr.append(self.indptr[-1][-1] + np.cumsum(counts, dtype=np.int64))
        self.num_edges += int(len(src))

    def finish(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        self.spool_i.close()
        if self.spool_r is not None:
            self.spool_r.close()
        e, i = self.num_edges, self.part.index
        typed = self.etype is not None
        if e:
            indices = np.memmap(self.work / f"grow_{i}_indices.bin", np.int64, "r", 0, (e,))
            etypes = (
                np.memmap(self.work / f"grow_{i}_types.bin", self.etype, "r", 0, (e,))
                if typed
                else None
            )
        else:
            indices = np.empty(0, np.int64)
            etypes = np.empty(0, self.etype) if typed else None
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
    dtype: Any = np.float32,
) -> list[GrownPart]:
    """Every part of this rank grown by ``hops - 1`` hops of halo (module docstring).
    Collective: every rank calls it with the same ``hops``. ``sampler``: a one-hop
    :class:`~shoal.distributed.sampler.DistNeighborSampler` with fanout -1 (every in-edge;
    with the store's schema on a typed store); ``pulls``: a
    :class:`~shoal.distributed.feature_store.DistFeatureStore` of the store's rows (None:
    the store has no features); ``tables``: the engine's
    :class:`~shoal.distributed.tables.NodeTables` (the grown nodes' degrees are added to
    them); ``work``: a scratch directory for the grown rows, kept as ``dtype`` (the
    stored rows', so that one source reads both)."""
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
            mb = sampler.sample(seeds)
            at += 1
            if k is None or not len(seeds):
                continue
            blk = mb.blocks[0]
            n_id = np.asarray(mb.n_id)
            dst = blk.edge_index[1].numpy()
            rel = None if blk.edge_type is None else blk.edge_type.numpy()
            if rel is None:  # rows by seed
                order = np.argsort(dst, kind="stable")
            else:  # rows by seed, each row's in-edges by relation
                order = np.lexsort((rel, dst))
            counts = np.bincount(dst, minlength=len(seeds))
            src = n_id[blk.edge_index[0].numpy()[order]]
            growing[k].add_rows(counts, src, None if rel is None else rel[order])
        new = []
        for g, end in zip(growing, ends, strict=True):
            g.frontier = (end, g.n)  # the nodes first reached by this hop
            new.append(np.concatenate(g.ids)[g.frontier[0] : g.n])
        tables.hold(np.concatenate(new) if new else np.empty(0, np.int64))  # collective
    out = []
    finished = [g.finish() for g in growing]
    extras = _pull_rows(parts, finished, pulls, work, world_size, step_rows, dtype)
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
    dtype: Any,
) -> list[np.ndarray | None]:
    """Every grown node's input rows per part (one ``.npy`` in ``work``, in local order),
    pulled from their owners in steps of ``step_rows``; returns them memory-mapped (None
    for every part when ``pulls`` is None: a store without features)."""
    if pulls is None:
        return [None] * len(parts)
    dim = int(pulls.feature_dim)
    step_rows = max(1, min(step_rows, STEP_BYTES // max(dim * np.dtype(dtype).itemsize, 1)))
    steps, writers = [], []
    for k, (p, f) in enumerate(zip(parts, finished, strict=True)):
        grown = f[0][p.num_nodes :]
        path = work / f"grow_{p.index}_rows.npy"
        writers.append((NpyAppender(path, dtype, (len(grown), dim)), path))
        steps += [(k, grown[a : a + step_rows]) for a in range(0, len(grown), step_rows)]
    at = 0
    while _any_left(at < len(steps), world):
        k, ids = steps[at] if at < len(steps) else (None, np.empty(0, np.int64))
        at += 1
        rows = pulls.pull(ids)  # collective
        if k is not None and len(ids):
            writers[k][0].append(rows.numpy())
            writers[k][0].write_out()  # no dirty pages left in a capped rank's cgroup
    out: list[np.ndarray | None] = []
    for wr, path in writers:
        wr.close()
        out.append(np.load(path, mmap_mode="r") if wr.shape[0] else None)
    return out
