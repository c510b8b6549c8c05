"""Distributed neighbour sampling: each frontier node is sampled by the rank that owns it.

DistDGL (Zheng et al., IA3 2020, Section 3.2, "sampling where the data lives"): a rank samples
the in-neighbours of the frontier nodes it owns from its parts' CSR and sends the others to
their owners, which sample them and send back the picks (global ids). Hop by hop (GraphSAGE,
Hamilton et al. NeurIPS 2017, Algorithm 2, lines 1-7) the result is the single-process
sampler's :class:`shoal.sample.MiniBatch`: :class:`DistNeighborSampler` supplies one hop's
draws (``_draw_hop``), :class:`shoal.sample.base.BlockSampler` the hop loop, relabelling and
blocks, and shoal's numba kernels (``shoal.sample._kernels``: Floyd / selection sampling keyed
by ``(batch seed, hop, row position)``) each row's draws, so with one rank the batches equal
:class:`shoal.sample.NeighborSampler`'s on the same CSR. :meth:`DistNeighborSampler.sample` is
collective: every rank calls it once per step (three all-to-all-v exchanges per hop, entered
even when empty). Link prediction's ``exclude`` (the batch's positive edges and reverses, DGL's
``exclude``) goes to the owners of the edges' destinations (one more exchange per batch), which
skip a requester's excluded edges only when they sample for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
import torch
import torch.distributed as dist

from shoal.data.hetero import HeteroSchema
from shoal.distributed.comm import CommStats, exchange
from shoal.distributed.feature_store import owner_of
from shoal.distributed.sampler_chunks import chunk_batches, sample_chunk
from shoal.distributed.segments import scatter_segments, segment_sums
from shoal.distributed.tables import NodeValues
from shoal.graph.blocks import MiniBatch
from shoal.rows.direct import RowFile
from shoal.rows.opener import open_rows
from shoal.sample import _exclude_kernels as KX
from shoal.sample import _kernels as K
from shoal.sample.base import BlockSampler, hop_rowptr
from shoal.sample.relations import RelationDraws, row_types
from shoal.sample.sampler import (
    DrawnEntries,
    DrawnMarks,
    GroupReads,
    HeldLists,
    NotedPositions,
    draws_per_seed,
    group_batches,
)
from shoal.store.reader import Partition
from shoal.utils.arrays import unique_sorted

__all__ = ["DistNeighborSampler"]

_NO_INDICES = np.empty(0, dtype=np.int64)  # the kernels' indices when only positions are drawn


class _DistGroup:
    """The state of :meth:`DistNeighborSampler.sample_group` on this rank: per (hop, part),
    the entries read, or, for the hop being collected, the positions drawn so far (this
    rank's own rows and the rows it serves for the others)."""

    def __init__(self) -> None:
        self.drawn: dict[tuple[int, int], DrawnEntries | DrawnMarks] = {}
        self.collecting = -1
        self.noted: dict[int, NotedPositions] = {}  # per part read from disk


class DistNeighborSampler(BlockSampler):
    """Samples mini-batches over parts spread across ranks.

    Args:
        parts: the :class:`~shoal.store.Partition` objects this rank holds (their local CSR:
            core rows, local source indices over core then halo).
        part_offsets: ``(p + 1,)`` new-ID range of every part.
        part_to_rank: ``(p,)`` rank holding each part.
        rank, world_size: this process's place.
        fanouts: per hop, hop 1 first (-1 = all).
        degrees: ``(N,)`` full in-degree of every node (for degree-normalised layers), or a
            :class:`~shoal.distributed.NodeValues` of the rank's own and halo nodes (local
            node tables): the batch's other nodes' degrees are then asked of their owners,
            one exchange per batch.
        stats: communication counters.
        group: the process group the ranks above belong to (default: the whole world).
        schema: a typed store's node types and relations (default None: untyped). Each hop
            then draws ``fanouts`` per relation (the owner draws each relation's fanout from
            the relation's run of the node's row, whose in-edges are grouped by relation: DGL's
            distributed ``sample_neighbors`` per edge type) and the blocks carry their edges'
            relations and sources' types (:mod:`shoal.sample.relations`). With one rank and a
            one-part store the batches equal the single-process sampler's on the graph.
        relation_fanouts: per relation name, its own per-hop fanouts (default none).
        type_of: the node type of new ids (``Store.type_of``; needed with ``schema``).

    A part that ``part_to_rank`` gives to this rank but that is not in ``parts`` (not
    resident: the ``disagg`` engine's swapped-out parts) has no neighbours to give: its
    frontier nodes get none, and :attr:`unavailable` counts them.

    Neighbour lists on disk (:meth:`read_from_disk`, an untyped store sampled without
    exclusions): an owner draws the *positions* of its rows' picks from the part's ``indptr``
    (the same draws) and reads the entries there with planned direct reads, never through
    page faults of the memory map; :meth:`sample_group` samples several batches together,
    each hop's entries of a group read in one sorted pass per part (the single-process
    :meth:`~shoal.sample.NeighborSampler.sample_group`'s scheme, collective here).
    """

    def __init__(
        self,
        *,
        parts: Sequence[Partition],
        part_offsets: np.ndarray,
        part_to_rank: np.ndarray,
        rank: int,
        world_size: int,
        fanouts: Sequence[int] | str,
        degrees: np.ndarray,
        stats: CommStats | None = None,
        group: dist.ProcessGroup | None = None,
        schema: HeteroSchema | None = None,
        relation_fanouts: Mapping[str, Sequence[int] | str] | None = None,
        type_of: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        self.group = group
        self.part_offsets = np.asarray(part_offsets, dtype=np.int64)
        self.rank = rank
        self.world_size = world_size
        super().__init__(fanouts, int(self.part_offsets[-1]), id_map="hashed")
        self.degrees = (
            degrees if isinstance(degrees, NodeValues) else np.asarray(degrees, np.float32)
        )
        self.stats = stats if stats is not None else CommStats()
        self.unavailable = 0
        #: per resident part whose neighbour lists are read from disk, its reader
        self._readers: dict[int, object] = {}
        #: per part read from disk, the rows whose lists are held in memory (read_from_disk)
        self._held: dict[int, HeldLists] = {}
        #: the memory of a group of batches sampled together (:meth:`sample_group`; 0: the
        #: batches are sampled one by one); the same on every rank
        self.group_bytes = 0
        #: the passes of :meth:`sample_group` over the parts' neighbour lists on disk
        self.group_reads = GroupReads()
        #: whether every rank reading lists from disk holds its batches' seeds' lists in
        #: memory (set by the engine, the same on every rank): :meth:`sample_group` then
        #: skips hop 0's pass, and a group's memory counts no hop-0 entries
        self.first_held = False
        self._local = threading.local()  # the group being sampled, by the thread sampling it
        # local tables: each pick carries its degree (the batch's, by local id, in _bdeg)
        self._bdeg = np.empty(0, np.float32)
        self._hop_deg = np.empty(0, np.float32)
        self.relations = None
        if schema is not None:
            if type_of is None:
                raise ValueError("a typed sampler needs the node type of new ids (type_of)")
            self.relations = RelationDraws(schema, self.fanouts, relation_fanouts)
            self.type_of = type_of
        self.set_parts(parts, part_to_rank)

    def _part_types(self) -> None:
        """Per resident part of a typed store drawn per relation: every core row's type and
        every entry's relation."""
        self._row_type, self._etypes = {}, {}
        if self.relations is not None and self.relations.per_relation:
            for i, p in self.parts.items():
                self._row_type[i] = row_types(p.type_bounds)
                self._etypes[i] = np.asarray(p.edge_types)

    def _local_degrees(self) -> None:
        """Per resident part, the degrees of its core rows (a view of the local tables) and
        of its halo nodes in halo order (4 B each): a pick's degree is then read at its local
        index, as the pick is made (local tables only)."""
        self._part_deg = None
        if not isinstance(self.degrees, NodeValues):
            return
        self._part_deg = {}
        for i, p in self.parts.items():
            at = int(self.degrees.index.positions(np.array([p.start]))[0]) if p.num_core else 0
            core = self.degrees.values[at : at + p.num_core]
            halo = self.degrees[self._l2g_halo[i]] if p.num_halo else np.zeros(0, np.float32)
            self._part_deg[i] = (core, np.asarray(halo, np.float32))

    def _own_degrees(self, ids: np.ndarray) -> np.ndarray:
        """Degrees of nodes this rank's resident parts own (local tables)."""
        out = np.zeros(len(ids), np.float32)
        if len(ids):
            part_of = owner_of(self.part_offsets, ids)
            for i in np.unique(part_of):
                if int(i) in self._part_deg:  # a part not resident: no degree (no picks)
                    sel = part_of == i
                    out[sel] = self._part_deg[int(i)][0][ids[sel] - self.parts[int(i)].start]
        return out

    def _empty_picks(self) -> np.ndarray:
        return np.empty((0, 2) if self._part_deg is not None else 0, dtype=np.int64)

    def _after_relabel(self, col: np.ndarray, m: int, n_new: int) -> None:
        if self._part_deg is not None:  # every pick's degree came with it
            self._bdeg = _room(self._bdeg, n_new)
            self._bdeg[col[:m]] = self._hop_deg[:m]

    def _degrees_of(self, n_id: np.ndarray) -> np.ndarray:
        if self._part_deg is None:
            return super()._degrees_of(n_id)
        return self._bdeg[: len(n_id)].copy()

    def set_parts(self, parts: Sequence[Partition], part_to_rank: np.ndarray) -> None:
        """Replace the resident parts and the part -> rank map (a new epoch's assignment)."""
        self.parts = {p.index: p for p in parts}
        self.part_to_rank = np.asarray(part_to_rank, dtype=np.int64)
        # halo local index -> global id, per part, loaded once (O(halo))
        self._l2g_halo = {i: np.asarray(p.halo_ids, dtype=np.int64) for i, p in self.parts.items()}
        self._local_degrees()
        self._part_types()

    def _sample_owned(
        self,
        ids: np.ndarray,
        fanout: int,
        key: np.uint64 | np.ndarray,
        ex: dict[int, np.ndarray] | None = None,
        segments: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(counts, picked global ids) for nodes this rank owns, in ``ids`` order; ``ex``:
        per part, sorted local keys ``row * num_nodes + source`` of edges to skip. With local
        tables the picks are ``(m, 2)`` rows: global id, full in-degree. ``segments``: the
        batch of each of ``ids`` (non-decreasing; several batches' rows at once, untyped and
        without ``ex``), ``key`` then each batch's key: every row draws what it draws with
        its own batch's rows alone."""
        n = ids.shape[0]
        counts = np.zeros(n, dtype=np.int64)
        if n == 0:
            return counts, self._empty_picks()
        part_of = owner_of(self.part_offsets, ids)
        pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for i in np.unique(part_of):
            sel = np.flatnonzero(part_of == i)
            part = self.parts.get(int(i))
            if part is None:  # not resident: no neighbours (counts stay 0)
                self.unavailable += int(sel.shape[0])
                continue
            rows = ids[sel] - part.start
            k = sel.shape[0]
            keys = None if ex is None else ex.get(int(i))
            keys = keys if keys is not None and len(keys) else None
            c = np.empty(k, dtype=np.int64)
            n_ex = np.empty(k, dtype=np.int64)
            if keys is not None and self._etypes:  # a typed part: per relation, skipping
                self._count_rows(part, rows, fanout, c, (keys, np.int64(part.num_nodes)))
            elif keys is not None:
                KX._count_excl(
                    part.indptr, part.indices, rows, k, fanout, keys, part.num_nodes, c, n_ex
                )
            else:
                self._count_rows(part, rows, fanout, c)
            rowptr = np.zeros(k + 1, dtype=np.int64)
            np.cumsum(c, out=rowptr[1:])
            m = int(rowptr[-1])
            picked = np.empty(m, dtype=np.int64)
            dst = np.empty(m, dtype=np.int64)
            # a stream per (part, row position) (_part_key)
            pkey = key if int(i) == 0 or segments is not None else _part_key(key, int(i))
            if keys is not None and self._etypes:  # (not ``ex``: the next part reads it)
                self._fill_rows(
                    part, rows, rowptr, pkey, picked, dst, (keys, np.int64(part.num_nodes))
                )
            elif keys is not None:
                KX._fill_excl(
                    part.indptr,
                    part.indices,
                    rows,
                    k,
                    rowptr,
                    pkey,
                    picked,
                    dst,
                    keys,
                    part.num_nodes,
                    n_ex,
                )
            elif segments is not None:  # several batches: each row its batch's stream
                disk = int(i) in self._readers
                rkeys, rpos = _row_streams(key, int(i), segments[sel])
                src = _NO_INDICES if disk else part.indices
                K._fill_keyed(part.indptr, src, rows, k, rowptr, rkeys, rpos, picked, disk)
                if disk:
                    self._read_picked(int(i), picked)
            elif int(i) in self._readers:  # positions drawn, their entries read
                K._fill(part.indptr, _NO_INDICES, rows, k, rowptr, pkey, picked, dst, True)
                self._read_picked(int(i), picked)
            else:
                self._fill_rows(part, rows, rowptr, pkey, picked, dst)
            # local source index -> global id (and its degree, read at the local index)
            h = picked >= part.num_core
            pdeg = None
            if self._part_deg is not None:
                core_deg, halo_deg = self._part_deg[int(i)]
                pdeg = np.empty(m, np.int64)
                pdeg[~h] = core_deg[picked[~h]]
                pdeg[h] = halo_deg[picked[h] - part.num_core]
            picked[~h] += part.start
            picked[h] = self._l2g_halo[int(i)][picked[h] - part.num_core]
            if pdeg is not None:
                picked = np.stack([picked, pdeg], axis=1)
            counts[sel] = c
            pieces.append((sel, rowptr, picked))
        # lay the pieces out in ids order
        rowptr_all = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=rowptr_all[1:])
        out = np.empty((int(rowptr_all[-1]),) + self._empty_picks().shape[1:], dtype=np.int64)
        for sel, rowptr, picked in pieces:
            scatter_segments(out, rowptr_all, sel, np.diff(rowptr), picked)
        return counts, out

    def _count_rows(
        self, part: Partition, rows: np.ndarray, fanout: int, c: np.ndarray, ex=None
    ) -> None:
        """``c[j]``: the neighbours drawn for core row ``rows[j]`` of ``part`` (a typed part's
        ``ex``: the local keys of edges to skip and the part's id count, or None)."""
        if self._etypes:
            self.relations.hop = self._hop
            et, rt = self._etypes[part.index], self._row_type[part.index]
            args = (part.indptr, et, rt, rows, rows.shape[0])
            self.relations.count_by_edge_type(*args, c, ex, part.indices)
            return
        K._count(part.indptr, rows, rows.shape[0], fanout, c)

    def _fill_rows(
        self,
        part: Partition,
        rows: np.ndarray,
        rowptr: np.ndarray,
        key: np.uint64,
        picked: np.ndarray,
        dst: np.ndarray,
        ex=None,
    ) -> None:
        """Draw row ``rows[j]``'s neighbours (local indices) into ``picked[rowptr[j]:]``;
        ``dst`` gets ``j`` (``ex``: as :meth:`_count_rows`')."""
        if self._etypes:
            et, rt, n = self._etypes[part.index], self._row_type[part.index], rows.shape[0]
            args = (part.indptr, part.indices, et, rt, rows, n)
            self.relations.fill_by_edge_type(*args, rowptr, key, picked, dst, ex)
            return
        K._fill(part.indptr, part.indices, rows, rows.shape[0], rowptr, key, picked, dst)

    def _exclusions(self, exclude: np.ndarray) -> list[dict[int, np.ndarray]]:
        """Per requesting rank, per part this rank holds: the local keys of the requester's
        excluded edges (each edge sent to the owner of its destination; collective)."""
        e = np.asarray(exclude, dtype=np.int64).reshape(-1, 2)
        owners = self.part_to_rank[owner_of(self.part_offsets, e[:, 1])] if len(e) else e[:, 1]
        mine = e[owners == self.rank]
        got: list[np.ndarray] = [np.empty((0, 2), np.int64)] * self.world_size
        got[self.rank] = mine
        if self.world_size > 1:
            away = np.flatnonzero(owners != self.rank)
            away = away[np.argsort(owners[away], kind="stable")]
            recv, counts = exchange(
                e[away],
                np.bincount(owners[away], minlength=self.world_size),
                self.stats,
                self.group,
            )
            off = np.concatenate([[0], np.cumsum(counts)])
            r = recv.numpy()
            for q in range(self.world_size):
                if q != self.rank:
                    got[q] = r[off[q] : off[q + 1]]
        out = []
        for edges in got:
            part_of = owner_of(self.part_offsets, edges[:, 1]) if len(edges) else edges[:, 1]
            keys = {}
            for i in np.unique(part_of):
                part = self.parts.get(int(i))
                if part is not None:
                    keys[int(i)] = _local_keys(part, self._l2g_halo[int(i)], edges[part_of == i])
            out.append(keys)
        return out

    def _serve(
        self,
        req: np.ndarray,
        req_counts: np.ndarray,
        fanout: int,
        key: np.uint64,
        ex: list[dict[int, np.ndarray]] | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Sample the peers' requests ``req`` (grouped by requesting rank, ``req_counts``),
        each without its requester's excluded edges."""
        if ex is None:
            return self._sample_owned(req, fanout, key)
        off = np.concatenate([[0], np.cumsum(req_counts)])
        pieces = [
            self._sample_owned(req[off[q] : off[q + 1]], fanout, key, ex[q])
            for q in range(self.world_size)
        ]
        return (np.concatenate([c for c, _ in pieces]), np.concatenate([p for _, p in pieces]))

    def sample(
        self,
        seeds: np.ndarray,
        seed: int = 0,
        *,
        exclude: np.ndarray | None = None,
        fanouts: Sequence[int] | None = None,
    ) -> MiniBatch:
        """Sample the blocks of ``seeds`` (unique global IDs). Collective.

        ``exclude``: ``(m, 2)`` global edges ``(src, dst)`` message passing must not use at any
        hop (module docstring); every rank passes an array (maybe empty) or every rank None.
        ``fanouts``: the first hops' fanouts only (:meth:`sample_group`'s passes; default
        the sampler's)."""
        if exclude is not None and self._readers:
            raise ValueError(
                "excluding edges needs the parts' neighbour lists in memory; this sampler "
                "reads them from disk"
            )
        ex = None if exclude is None else self._exclusions(exclude)
        fan = self.fanouts if fanouts is None else list(fanouts)
        mb = self._sample_hops(np.asarray(seeds, dtype=np.int64), fan, seed, ex)
        if self.relations is None:
            return mb
        return self.relations.label(mb, self.type_of(np.asarray(mb.n_id)))

    # ------------------------------------------------------------ neighbour lists on disk
    def read_from_disk(
        self,
        *,
        io_threads: int = 8,
        group_bytes: int = 0,
        hold: Mapping[int, np.ndarray] | None = None,
        hold_bytes: int = 0,
    ) -> list[int]:
        """Read the neighbour lists of the resident parts whose ``indices`` are memory maps
        of a file (the memory plan left them on disk) with planned direct reads
        (:class:`~shoal.rows.direct.RowReader`, ``io_threads`` concurrent reads) instead of
        page faults; ``group_bytes``: the memory of a group of batches sampled together by
        :meth:`sample_group` (give every rank the same figure: the group's passes are
        collective). ``hold[part]``: core rows whose lists are read once and held in memory
        (:class:`~shoal.sample.sampler.HeldLists`: the training seeds, hop 0 of every batch),
        when all of them fit ``hold_bytes``. Untyped stores only (a typed part's draws per
        relation read its entries). Returns the parts read from disk."""
        if self.relations is not None:
            raise ValueError("a typed store's parts are sampled from memory")
        self.close()
        for i, p in self.parts.items():
            src = p.indices.reshape(-1, 1)
            if p.indices.size and RowFile.of(src) is not None:
                self._readers[i] = open_rows(src, threads=io_threads)
        self.group_bytes = int(group_bytes)
        rows = {i: np.asarray((hold or {}).get(i, _NO_INDICES), np.int64) for i in self._readers}
        need = sum(
            HeldLists.nbytes(self.parts[i].indptr, r, self.parts[i].indices.dtype.itemsize)
            for i, r in rows.items()
        )
        if hold and need <= hold_bytes:
            for i, r in rows.items():
                p = self.parts[i]
                self._held[i] = HeldLists(p.indptr, r, self._readers[i].read, p.indices.dtype)
        return sorted(self._readers)

    @property
    def holds_first_hop(self) -> bool:
        """Whether every part this rank reads from disk has its held lists (True when it
        reads none): hop 0 of the batches of its held rows reads nothing."""
        return set(self._held) == set(self._readers)

    @property
    def reads_from_disk(self) -> bool:
        """Whether this rank reads some part's neighbour lists from disk."""
        return bool(self._readers)

    @property
    def structure_bytes_read(self) -> int:
        """Bytes of the parts' neighbour lists read from disk so far (0: all in memory), the
        held rows' included."""
        return sum(int(r.stats.bytes) for r in self._readers.values())

    def group_size(self, batch_size: int, room: int = 0) -> int:
        """Batches of ``batch_size`` seeds :meth:`sample_group` takes together within
        :attr:`group_bytes` and ``room`` more bytes (memory idle meanwhile, the same on every
        rank; default 0) (1: one by one), counting each batch's draws twice: a rank draws its
        own rows' neighbours and those of the rows the others ask it for."""
        if self.group_bytes <= 0:
            return 1
        bytes_ = (self.group_bytes + max(int(room), 0)) // 2
        return group_batches(self.fanouts, bytes_, batch_size, first_held=self.first_held)

    def sample_group(self, batches: Sequence[tuple[np.ndarray, int]]) -> Iterator[MiniBatch]:
        """``sample(seeds, seed)`` of each ``(seeds, seed)`` of ``batches``, in order, the
        same batches; collective (every rank passes as many batches). With
        :attr:`group_bytes` set, sampled together hop by hop: every batch is drawn up to hop
        ``h`` (the draws are keyed by batch seed, hop and row, so drawing again gives the same
        picks), each owner noting the positions its rows draw at hop ``h``, own and served;
        each part's noted positions are then read in one sorted, coalesced pass, and the
        batches drawn to the end from what was read. A group reads at most each part's file
        once per hop (DiskGNN's sorted passes over the structure: Liu et al., VLDB 2025,
        Sec. 3); counted in :attr:`group_reads`. The cost: hop ``h``'s exchanges run ``L - h
        + 1`` times instead of once, each for a chunk of batches at a time
        (:func:`~shoal.distributed.sampler_chunks.sample_chunk`: one set of exchanges per
        hop for the chunk). With :attr:`first_held` hop 0 has no pass: its entries come from
        the held lists (any outside them read directly)."""
        if self.group_bytes <= 0 or len(batches) < 2:
            for seeds, seed in batches:
                yield self.sample(seeds, seed)
            return
        g = _DistGroup()
        size = chunk_batches(self.fanouts, max(len(seeds) for seeds, _ in batches))
        if self.world_size > 1:  # the same chunks on every rank (their exchanges pair up)
            t = torch.tensor([size], dtype=torch.int64)
            dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.group)
            size = int(t.item())
        chunks = [batches[a : a + size] for a in range(0, len(batches), size)]
        seeds_in = sum(len(seeds) for seeds, _ in batches)
        for hop in range(1 if self.first_held else 0, self.num_layers):
            # about what this rank's batches draw, its rows serving as many as it asks
            drawn = seeds_in * draws_per_seed(self.fanouts, hop)
            g.collecting = hop
            g.noted = {
                i: NotedPositions(self.parts[i].indices.shape[0], drawn) for i in self._readers
            }
            for chunk in chunks:
                self._in_group(g, chunk, self.fanouts[: hop + 1], blocks=False)
            for i, reader in self._readers.items():
                pos = g.noted[i].positions()
                vals = np.empty((len(pos), 1), dtype=self.parts[i].indices.dtype)
                nbytes = reader.read(pos, vals) if len(pos) else 0
                g.drawn[(hop, i)] = g.noted[i].read(pos, vals[:, 0])
                del pos
                r = self.group_reads
                r.passes, r.bytes = r.passes + 1, r.bytes + int(nbytes)
                r.largest = max(r.largest, int(nbytes))
            g.noted = {}
        g.collecting = -1
        for chunk in chunks:
            yield from self._in_group(g, chunk, self.fanouts)

    def _in_group(
        self, g: _DistGroup, chunk: Sequence[tuple[np.ndarray, int]], fanouts, blocks=True
    ) -> list[MiniBatch]:
        """A chunk of a group's batches sampled together (:func:`sample_chunk`) in the
        group's pass ``g``."""
        self._local.group = g
        try:
            return sample_chunk(self, chunk, fanouts, blocks=blocks)
        finally:
            self._local.group = None

    def _read_picked(self, i: int, picked: np.ndarray) -> None:
        """Replace the positions ``picked`` of part ``i``'s ``indices`` by the entries there:
        read now (one planned pass over their sorted distinct positions), or, in a group,
        taken from the hop's pass (or noted for it: the draws of the hop being collected are
        placeholders, the last hop of a pass that is dropped). A group's hop past the first
        takes the held rows' positions from its pass too unless they hold most of the part's
        entries (:data:`~shoal.sample.sampler.HELD_LATER_HOPS`)."""
        held, in_group = self._held.get(i), getattr(self._local, "group", None) is not None
        if (
            held is not None and len(picked) and held.serves(self._hop, in_group)
        ):  # the held rows' entries from memory
            held.resolve(picked, lambda rest: self._read_picked_disk(i, rest))
            return
        self._read_picked_disk(i, picked)

    def _read_picked_disk(self, i: int, picked: np.ndarray) -> None:
        """:meth:`_read_picked` of positions outside the held rows."""
        if len(picked) == 0:
            return
        g = getattr(self._local, "group", None)
        if g is not None and self._hop == g.collecting:
            g.noted[i].add(picked)
            picked[:] = 0
            return
        if g is not None and (self._hop, i) in g.drawn:
            picked[:] = g.drawn[(self._hop, i)].take(picked)
            return
        pos, inv = np.unique(picked, return_inverse=True)
        vals = np.empty((len(pos), 1), dtype=self.parts[i].indices.dtype)
        self._readers[i].read(pos, vals)
        picked[:] = vals[inv, 0]

    def close(self) -> None:
        """Close the readers of neighbour lists on disk (:meth:`read_from_disk`)."""
        for r in self._readers.values():
            r.close()
        self._readers, self._held = {}, {}

    def _draw_hop(
        self, n: int, fanout: int, key: np.uint64, exclude: list[dict[int, np.ndarray]] | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One hop (:meth:`BlockSampler._draw_hop`; collective): this rank samples the frontier
        nodes it owns, sends the others to their owners and serves the peers' requests."""
        frontier = self._nodes[:n]
        owners = self.part_to_rank[owner_of(self.part_offsets, frontier)]
        local = np.flatnonzero(owners == self.rank)
        counts = np.zeros(n, dtype=np.int64)
        lc, lp = self._sample_owned(
            frontier[local], fanout, key, None if exclude is None else exclude[self.rank]
        )
        counts[local] = lc
        if self._part_deg is not None:  # the frontier's degrees: own here, others' below
            self._bdeg = _room(self._bdeg, n)
            self._bdeg[local] = self._own_degrees(frontier[local])
        if self.world_size > 1:
            remote = np.flatnonzero(owners != self.rank)
            remote = remote[np.argsort(owners[remote], kind="stable")]
            send_counts = np.bincount(owners[remote], minlength=self.world_size)
            req, req_counts = exchange(frontier[remote], send_counts, self.stats, self.group)
            # serve the peers' requests (a distinct stream from this rank's own rows)
            sc, sp = self._serve(
                req.numpy(), req_counts, fanout, key ^ np.uint64(0x5BD1E995), exclude
            )
            per_rank = segment_sums(sc, req_counts)
            if self._part_deg is not None:  # each count with the requested node's degree
                sc = np.stack([sc, self._own_degrees(req.numpy()).astype(np.int64)], axis=1)
            # (the answers' sizes are known: a count per request, then the picks counted)
            rc, _ = exchange(sc, req_counts, self.stats, self.group, recv_counts=send_counts)
            rc = rc.numpy()
            if self._part_deg is not None:
                self._bdeg[remote] = rc[:, 1]
                rc = np.ascontiguousarray(rc[:, 0])
            got = segment_sums(rc, send_counts)
            rp, _ = exchange(sp, per_rank, self.stats, self.group, recv_counts=got)
            counts[remote] = rc
        else:
            remote = np.empty(0, dtype=np.int64)
            rc = np.empty(0, dtype=np.int64)
            rp = torch.from_numpy(self._empty_picks())
        rowptr = hop_rowptr(counts, n)
        picked = np.empty(int(rowptr[-1]), dtype=np.int64)
        rp = rp.numpy()
        if self._part_deg is None:
            scatter_segments(picked, rowptr, local, lc, lp)
            scatter_segments(picked, rowptr, remote, rc, rp)
        else:  # the picks' degrees too
            rp = rp.reshape(-1, 2)
            deg = np.empty(int(rowptr[-1]), dtype=np.int64)
            for col, out in ((0, picked), (1, deg)):
                scatter_segments(out, rowptr, local, lc, np.ascontiguousarray(lp[:, col]))
                scatter_segments(out, rowptr, remote, rc, np.ascontiguousarray(rp[:, col]))
            self._hop_deg = deg.astype(np.float32)
        dst = np.repeat(np.arange(n, dtype=np.int64), counts)
        return rowptr, picked, dst


def _part_key(key: np.uint64, part: int) -> np.uint64:
    """The stream of ``part``'s rows under the hop's ``key``: rows at the same position in
    different parts must not share random numbers (part 0 keeps ``key``, so one part = one
    sampler)."""
    return key if part == 0 else np.uint64(K._stream_key(key, np.uint64(part)))


def _row_streams(keys: np.ndarray, part: int, seg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``part`` drawn for several batches at once (``seg``: each row's batch,
    non-decreasing): its batch's key for the part, and its position among the batch's rows
    of the part (what :meth:`DistNeighborSampler._sample_owned` keys one batch's row by)."""
    pkeys = np.array([_part_key(np.uint64(k), part) for k in keys], dtype=np.uint64)
    pos = np.arange(len(seg), dtype=np.int64) - np.searchsorted(seg, seg, side="left")
    return pkeys[seg], pos


def _local_keys(part: Partition, halo: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Sorted ``row * num_nodes + local source`` keys of the global ``edges`` (src, dst) whose
    destination is a core node of ``part``; a source that is no neighbour there is dropped."""
    row = edges[:, 1] - part.start
    src = edges[:, 0]
    core = (src >= part.start) & (src < part.start + part.num_core)
    pos = np.searchsorted(halo, src)
    hit = pos < len(halo)
    hit[hit] = halo[pos[hit]] == src[hit]
    lsrc = np.where(core, src - part.start, part.num_core + pos)
    keep = core | hit
    return unique_sorted(row[keep] * np.int64(part.num_nodes) + lsrc[keep])


def _room(buf: np.ndarray, n: int) -> np.ndarray:
    """``buf``, or a larger float32 buffer (contents kept) when it holds fewer than ``n``."""
    if buf.shape[0] >= n:
        return buf
    grown = np.empty(max(n, 2 * buf.shape[0]), np.float32)
    grown[: buf.shape[0]] = buf
    return grown
