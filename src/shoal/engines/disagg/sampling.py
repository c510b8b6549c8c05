"""The ``disagg`` batch workers' sampler: replicated high-degree nodes, swapped-out parts.

Armada (Waleffe et al., 2025), Section 3 ("Mini Batch Preparation Layer": distributed
construction "supports replicating high degree nodes on each worker") and Section 5
("Partition Assignment to Batch Construction Workers": "the nodes to be replicated are placed
in a special partition that is assigned to, and kept in memory, on *all* workers").

:class:`Replica` is that special partition: the ``N`` nodes of highest in-degree (ties to the
lower id); unlike the paper's layout the nodes also stay in their own parts, and only the
*other* batch workers use the copy. :class:`BatchSampler` extends
:class:`~shoal.distributed.DistNeighborSampler`: it samples replicated nodes from the replica
(the same kernel and distribution, another stream) and a swapped-out part's nodes from the
store's files (:func:`shoal.rows.open_rows`; the draws of a resident part), or with
``swapped="skip"`` gives them no neighbours (counted as ``unavailable``)
(docs/distributed.md#disagg-armada).

Link prediction's exclusions (``sample(..., exclude=)``) are honoured on every path, with the
draws a resident part gives: a swapped-out part's requested rows are then read whole from the
store, and a replicated frontier node with an excluded in-edge is drawn by its owner, not from
the replica.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shoal.distributed.comm import exchange
from shoal.distributed.feature_store import owner_of
from shoal.distributed.sampler import DistNeighborSampler
from shoal.distributed.segments import scatter_segments, segment_sums
from shoal.graph.blocks import MiniBatch
from shoal.rows import open_rows
from shoal.rows.gather import read_rows
from shoal.rows.parts import part_rows
from shoal.sample import _exclude_kernels as KX
from shoal.sample import _kernels as K
from shoal.sample.base import hop_rowptr
from shoal.store.reader import Store
from shoal.utils.arrays import unique_sorted

__all__ = ["BatchSampler", "Replica", "replica_count"]

_NO_INDICES = np.empty(0, dtype=np.int64)  # the kernels' indices when only positions are drawn
_REPLICA_STREAM = np.uint64(0x52455043)  # the replica's draws: a stream of their own
_SERVE_STREAM = np.uint64(0x5BD1E995)  # DistNeighborSampler's stream for peers' requests


def replica_count(spec: str | int, num_nodes: int) -> int:
    """Nodes to replicate: an int (nodes) or ``"1%"`` (of the nodes); 0 = none."""
    text = str(spec).strip()
    if text.endswith("%"):
        n = int(num_nodes * float(text[:-1]) / 100)
    else:
        n = int(text)
    if n < 0:
        raise ValueError(f"replicate_top must be >= 0, got {spec!r}")
    return min(n, num_nodes)


@dataclass
class Replica:
    """The replicated nodes (see the module docstring): ``ids`` sorted; row ``r`` of the CSR
    (``indptr``, ``indices``: global ids) and of ``features`` is node ``ids[r]``. A typed
    store's replica also has ``edge_types`` (the relation of every entry, each row grouped by
    relation as in the store part) and ``row_type`` (the node type of every row)."""

    ids: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    features: np.ndarray
    bytes_read: int = 0
    member: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    edge_types: np.ndarray | None = None
    row_type: np.ndarray | None = None

    @classmethod
    def build(cls, store: Store, degrees: np.ndarray, n: int) -> Replica:
        """The ``n`` nodes of highest ``degrees`` (ties: lower id first), read from the
        store's parts (only their rows)."""
        deg = np.asarray(degrees)
        ids = np.sort(np.argsort(-deg, kind="stable")[:n]).astype(np.int64)
        offsets = np.asarray(store.part_offsets, np.int64)
        dim = int(store.feature_dim)
        typed = store.schema is not None
        owner = owner_of(offsets, ids)
        lists, feats, read = [], np.empty((len(ids), dim), np.float32), 0
        for j in np.unique(owner):
            sel = np.flatnonzero(owner == j)
            part = store.part(int(j))
            rows = ids[sel] - part.start
            indptr = np.asarray(part.indptr)
            b, e = indptr[rows], indptr[rows + 1]
            lens = e - b
            pos = np.repeat(b - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(
                int(lens.sum())
            )
            loc = np.asarray(part.indices[pos], np.int64)
            glob = _to_global(loc, part.start, part.num_core, np.asarray(part.halo_ids))
            et = np.asarray(part.edge_types[pos]) if typed else None
            lists.append((sel, lens, glob, et))
            if typed:  # every type's rows, padded to the widest type (rows sorted, distinct)
                src = part_rows(part)
                try:
                    f = np.empty((len(rows), dim), np.float32)
                    src.read(rows, f)
                    feats[sel] = f
                finally:
                    src.close()
                read += loc.size * part.edge_types.itemsize
            else:
                read_rows(part.features, rows, feats, at=sel)
            read += 16 * len(rows) + loc.size * part.indices.itemsize + feats[sel].nbytes
        lens = np.zeros(len(ids), np.int64)
        for sel, ln, _, _ in lists:
            lens[sel] = ln
        indptr = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(lens, out=indptr[1:])
        indices = np.empty(int(indptr[-1]), np.int64)
        etypes = np.empty(int(indptr[-1]), np.int64) if typed else None
        for sel, ln, glob, et in lists:
            where = np.repeat(indptr[sel] - np.concatenate([[0], np.cumsum(ln)[:-1]]), ln)
            indices[where + np.arange(len(glob))] = glob
            if typed:
                etypes[where + np.arange(len(glob))] = et
        member = np.zeros(store.num_nodes, bool)
        member[ids] = True
        if not typed:
            return cls(ids, indptr, indices, feats, read, member)
        row_type = store.type_of(ids).astype(np.int32)
        return cls(ids, indptr, indices, feats, read, member, etypes, row_type)

    @property
    def nbytes(self) -> int:
        """Memory the replica takes on every batch worker."""
        arrays = (self.ids, self.indptr, self.indices, self.features)
        typed = (self.edge_types, self.row_type) if self.edge_types is not None else ()
        return int(sum(a.nbytes for a in (*arrays, *typed))) + int(self.member.nbytes)

    def positions(self, nodes: np.ndarray) -> np.ndarray:
        """Row of each of ``nodes`` in the replica, -1 when not replicated."""
        out = np.full(len(nodes), -1, np.int64)
        if len(nodes) and len(self.ids):
            hit = self.member[nodes]
            out[hit] = np.searchsorted(self.ids, nodes[hit])
        return out

    def sample(
        self, rows: np.ndarray, fanout: int, key: np.uint64
    ) -> tuple[np.ndarray, np.ndarray]:
        """(counts, picked global ids) of replica ``rows``, uniformly without replacement."""
        k = len(rows)
        c = np.zeros(k, np.int64)
        if k == 0:
            return c, np.zeros(0, np.int64)
        K._count(self.indptr, rows, k, fanout, c)
        rowptr = np.zeros(k + 1, np.int64)
        np.cumsum(c, out=rowptr[1:])
        picked = np.empty(int(rowptr[-1]), np.int64)
        dst = np.empty_like(picked)
        K._fill(self.indptr, self.indices, rows, k, rowptr, key, picked, dst)
        return c, picked

    def sample_relations(
        self, rows: np.ndarray, relations, key: np.uint64
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`sample` of a typed store: each relation's fanout of the hop
        ``relations.hop`` (a :class:`~shoal.sample.relations.RelationDraws`)."""
        k = len(rows)
        c = np.zeros(k, np.int64)
        if k == 0:
            return c, np.zeros(0, np.int64)
        et, rt = self.edge_types, self.row_type
        relations.count_by_edge_type(self.indptr, et, rt, rows, k, c)
        rowptr = np.zeros(k + 1, np.int64)
        np.cumsum(c, out=rowptr[1:])
        picked = np.empty(int(rowptr[-1]), np.int64)
        dst = np.empty_like(picked)
        relations.fill_by_edge_type(
            self.indptr, self.indices, et, rt, rows, k, rowptr, key, picked, dst
        )
        return c, picked


def _to_global(loc: np.ndarray, start: int, num_core: int, halo: np.ndarray) -> np.ndarray:
    """Local source indices of a part (core, then halo) as global ids."""
    out = loc + start
    h = loc >= num_core
    out[h] = halo[loc[h] - num_core]
    return out


def _request_keys(keys: np.ndarray, rows: np.ndarray, n_ids: int) -> np.ndarray:
    """A part's sorted local keys ``row * n_ids + source`` as sorted keys ``j * n_ids +
    source`` of the request positions ``j`` of ``rows`` (distinct); other rows' dropped."""
    order = np.argsort(rows, kind="stable")
    srt = rows[order]
    r = keys // n_ids
    at = np.minimum(np.searchsorted(srt, r), len(srt) - 1)
    hit = srt[at] == r
    return np.sort(order[at[hit]] * np.int64(n_ids) + keys[hit] % n_ids)


class _PartFiles:
    """Planned reads of one store part's ``indptr``, ``indices`` and ``halo_ids`` (each
    ``None`` when it is in memory already: then indexed directly)."""

    def __init__(self, store: Store, j: int) -> None:
        self.part = store.part(j)
        names = ("indptr", "indices", "halo_ids")
        if store.schema is not None:  # a typed part: the relation of every entry
            names += ("edge_types",)
        self.arrays = {n: getattr(self.part, n) for n in names}
        self.readers = {
            n: open_rows(a.reshape(-1, 1), threads=1) if a.size else None
            for n, a in self.arrays.items()
        }
        self.bytes = 0

    def take(self, name: str, pos: np.ndarray) -> np.ndarray:
        """Entries ``pos`` (any order, repeats allowed) of array ``name`` as int64."""
        a, r = self.arrays[name], self.readers[name]
        if len(pos) == 0:
            return np.zeros(0, np.int64)
        if r is None:
            return np.asarray(a[pos], np.int64)
        u, inv = np.unique(pos, return_inverse=True)
        vals = np.empty((len(u), 1), a.dtype)
        self.bytes += int(r.read(u, vals))
        return vals[inv.reshape(-1), 0].astype(np.int64)

    def close(self) -> None:
        for r in self.readers.values():
            if r is not None:
                r.close()


class BatchSampler(DistNeighborSampler):
    """:class:`~shoal.distributed.DistNeighborSampler` with a replica and swapped-out parts
    read from the store (module docstring); link prediction's ``exclude`` is honoured on
    every path (:meth:`sample`).

    Args:
        store: the opened store (files of swapped-out parts).
        replica: the replicated nodes, or None.
        swapped: ``"read"`` (sample swapped-out parts from the store) or ``"skip"``.
        Others: :class:`~shoal.distributed.DistNeighborSampler`'s.
    """

    def __init__(
        self, *, store: Store, replica: Replica | None, swapped: str, **kwargs: Any
    ) -> None:
        if swapped not in ("read", "skip"):
            raise ValueError(f"swapped must be 'read' or 'skip', got {swapped!r}")
        super().__init__(**kwargs)
        self.store, self.replica, self.swapped = store, replica, swapped
        self._excluded_dst: np.ndarray | None = None  # the batch's excluded edges' ends
        self._files: dict[int, _PartFiles] = {}
        self.counters = dict.fromkeys(
            ("remote_requests", "replica_sampled", "replica_saved_bytes", "disk_sampled"), 0
        )

    @property
    def disk_bytes(self) -> int:
        """Bytes read from the store to sample swapped-out parts (open files only)."""
        return sum(f.bytes for f in self._files.values())

    def close(self) -> None:
        """Close the readers of swapped-out parts (reopened when needed)."""
        for f in self._files.values():
            f.close()
        self._files.clear()

    # ------------------------------------------------------------ link prediction
    def sample(
        self, seeds: np.ndarray, seed: int = 0, *, exclude: np.ndarray | None = None
    ) -> MiniBatch:
        """:meth:`DistNeighborSampler.sample <shoal.distributed.DistNeighborSampler.sample>`
        (collective); ``exclude``'s edges are skipped at every hop wherever a frontier node
        is drawn: by its owner from a resident part or from the store's files, and a
        replicated node with an excluded in-edge is drawn by its owner, not from the
        replica."""
        e = None if exclude is None else np.asarray(exclude, np.int64).reshape(-1, 2)
        self._excluded_dst = None if e is None else unique_sorted(e[:, 1])
        try:
            return super().sample(seeds, seed, exclude=e)
        finally:
            self._excluded_dst = None

    def _exclusions(self, exclude: np.ndarray) -> list[dict[int, np.ndarray]]:
        """The requesters' local keys (collective) for the resident parts and, when
        swapped-out parts are read (``swapped="read"``), for this worker's swapped-out parts
        too (keys over the store part's local ids, which :meth:`_from_store` reads)."""
        if self.swapped == "skip":
            return super()._exclusions(exclude)
        mine = np.flatnonzero(self.part_to_rank == self.rank)
        away = [int(j) for j in mine if int(j) not in self.parts]
        parts, halo = self.parts, self._l2g_halo
        # the store's parts stand in for the swapped-out ones while the keys are made
        self.parts = {**parts, **{j: self.store.part(j) for j in away}}
        self._l2g_halo = {**halo, **{j: self.store.part(j).halo_ids for j in away}}
        try:
            return super()._exclusions(exclude)
        finally:
            self.parts, self._l2g_halo = parts, halo

    # ------------------------------------------------------------ swapped-out parts
    def _sample_owned(self, ids, fanout, key, ex=None):
        n = ids.shape[0]
        if n == 0:
            return super()._sample_owned(ids, fanout, key, ex)
        part_of = owner_of(self.part_offsets, ids)
        away = ~np.isin(part_of, np.fromiter(self.parts, np.int64, len(self.parts)))
        if self.swapped == "skip":  # the base counts them unavailable
            away[:] = False
        if ex is None and not away.any():
            return super()._sample_owned(ids, fanout, key)
        here = np.flatnonzero(~away)  # each part's rows keep their order: the same draws
        pieces = [(here, *super()._sample_owned(ids[here], fanout, key, ex))]
        for j in np.unique(part_of[away]):
            sel = np.flatnonzero(part_of == j)
            pkey = key if int(j) == 0 else np.uint64(K._stream_key(key, np.uint64(j)))
            keys = None if ex is None else ex.get(int(j))
            pieces.append((sel, *self._from_store(int(j), ids[sel], fanout, pkey, keys)))
            self.counters["disk_sampled"] += len(sel)
        counts = np.zeros(n, np.int64)
        for sel, c, _ in pieces:
            counts[sel] = c
        rowptr = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=rowptr[1:])
        out = np.empty(int(rowptr[-1]), np.int64)
        for sel, c, picked in pieces:
            scatter_segments(out, rowptr, sel, c, picked)
        return counts, out

    def _from_store(
        self, j: int, nodes: np.ndarray, fanout: int, key: np.uint64, keys=None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``nodes`` (of part ``j``) from the store's files: the row offsets, then the
        drawn positions (the draws a resident copy of the part gives), then their ids.
        ``keys``: the sorted local keys ``row * num_nodes + source`` of a requester's
        excluded edges in part ``j`` (link prediction): the rows are then read whole, and
        drawn without those edges as a resident part's are."""
        f = self._files.get(j)
        if f is None:
            f = self._files[j] = _PartFiles(self.store, j)
        part = f.part
        k = len(nodes)
        rows = nodes - part.start
        ends = f.take("indptr", np.concatenate([rows, rows + 1]))
        begin, deg = ends[:k], ends[k:] - ends[:k]
        sub = np.zeros(k + 1, np.int64)  # a CSR of just these rows, in request order
        np.cumsum(deg, out=sub[1:])
        seq = np.arange(k, dtype=np.int64)
        c = np.empty(k, np.int64)
        rel = self.relations if self._per_relation() else None
        ex, entries = None, _NO_INDICES
        if keys is not None and len(keys):  # the sub-CSR's rows are the request positions
            ex = (_request_keys(keys, rows, part.num_nodes), np.int64(part.num_nodes))
        if rel is not None or ex is not None:  # the part's positions of the sub-CSR's entries
            at = np.repeat(begin - sub[:-1], deg) + np.arange(int(sub[-1]))
            if ex is not None:
                entries = f.take("indices", at)
        if rel is not None:  # the rows' relations; the sub-CSR's entries are its positions
            et = f.take("edge_types", at)
            rt = np.asarray(self.type_of(nodes), np.int32)
            rel.hop = self._hop
            rel.count_by_edge_type(sub, et, rt, seq, k, c, ex, entries)
        elif ex is not None:
            n_ex = np.empty(k, np.int64)
            KX._count_excl(sub, entries, seq, k, fanout, *ex, c, n_ex)
        else:
            K._count(sub, seq, k, fanout, c)
        rowptr = np.zeros(k + 1, np.int64)
        np.cumsum(c, out=rowptr[1:])
        m = int(rowptr[-1])
        picked = np.empty(m, np.int64)
        dst = np.empty(m, np.int64)
        if rel is not None and ex is not None:  # local ids
            rel.fill_by_edge_type(sub, entries, et, rt, seq, k, rowptr, key, picked, dst, ex)
        elif rel is not None:  # positions in the sub-CSR
            pos = np.arange(int(sub[-1]), dtype=np.int64)
            rel.fill_by_edge_type(sub, pos, et, rt, seq, k, rowptr, key, picked, dst)
        elif ex is not None:  # local ids
            KX._fill_excl(sub, entries, seq, k, rowptr, key, picked, dst, *ex, n_ex)
        else:  # positions in the sub-CSR
            K._fill(sub, _NO_INDICES, seq, k, rowptr, key, picked, dst, True)
        loc = picked if ex is not None else f.take("indices", picked - sub[dst] + begin[dst])
        h = loc >= part.num_core
        out = loc + part.start
        out[h] = f.take("halo_ids", loc[h] - part.num_core)
        return c, out

    def _per_relation(self) -> bool:
        """Whether the draws are per relation (a typed store with several relations)."""
        return self.relations is not None and self.relations.per_relation

    # ------------------------------------------------------------ one hop
    def _draw_hop(self, n, fanout, key, exclude):
        """One hop (collective): own frontier nodes here (resident or from the store),
        replicated ones of other workers from the replica, the rest from their owners."""
        if self._part_deg is not None:
            raise NotImplementedError("the disagg batch sampler takes a global degree table")
        frontier = self._nodes[:n]
        owners = self.part_to_rank[owner_of(self.part_offsets, frontier)]
        mine = owners == self.rank
        rpos = (
            self.replica.positions(frontier)
            if self.replica is not None
            else np.full(n, -1, np.int64)
        )
        if self.replica is not None and self._excluded_dst is not None:
            # a replicated node with an excluded in-edge goes to its owner, which skips it
            rpos[np.isin(frontier, self._excluded_dst)] = -1
        local = np.flatnonzero(mine)
        rep = np.flatnonzero(~mine & (rpos >= 0))
        remote = np.flatnonzero(~mine & (rpos < 0))
        counts = np.zeros(n, np.int64)
        own = None if exclude is None else exclude[self.rank]
        lc, lp = self._sample_owned(frontier[local], fanout, key, own)
        counts[local] = lc
        ec, ep = np.zeros(0, np.int64), np.zeros(0, np.int64)
        if len(rep):
            rkey = np.uint64(K._stream_key(key, _REPLICA_STREAM))
            if self._per_relation():
                self.relations.hop = self._hop
                ec, ep = self.replica.sample_relations(rpos[rep], self.relations, rkey)
            else:
                ec, ep = self.replica.sample(rpos[rep], fanout, rkey)
            counts[rep] = ec
            self.counters["replica_sampled"] += len(rep)
            # a request: its id out, its count and its picks back (8 bytes each)
            self.counters["replica_saved_bytes"] += 16 * len(rep) + 8 * int(ec.sum())
        rc, rp = np.zeros(0, np.int64), np.zeros(0, np.int64)
        if self.world_size > 1:
            remote = remote[np.argsort(owners[remote], kind="stable")]
            self.counters["remote_requests"] += len(remote)
            send_counts = np.bincount(owners[remote], minlength=self.world_size)
            req, req_counts = exchange(frontier[remote], send_counts, self.stats, self.group)
            sc, sp = self._serve(req.numpy(), req_counts, fanout, key ^ _SERVE_STREAM, exclude)
            per_rank = segment_sums(sc, req_counts)
            # (the answers' sizes are known: a count per request, then the picks counted)
            rct, _ = exchange(sc, req_counts, self.stats, self.group, recv_counts=send_counts)
            rc = rct.numpy()
            got = segment_sums(rc, send_counts)
            rpt, _ = exchange(sp, per_rank, self.stats, self.group, recv_counts=got)
            rp = rpt.numpy()
            counts[remote] = rc
        rowptr = hop_rowptr(counts, n)
        picked = np.empty(int(rowptr[-1]), np.int64)
        scatter_segments(picked, rowptr, local, lc, lp)
        scatter_segments(picked, rowptr, rep, ec, ep)
        if len(remote):
            scatter_segments(picked, rowptr, remote, rc, rp)
        dst = np.repeat(np.arange(n, dtype=np.int64), counts)
        return rowptr, picked, dst
