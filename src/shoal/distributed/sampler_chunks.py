"""Several batches sampled hop by hop together: one set of exchanges per hop for all of them.

:meth:`DistNeighborSampler.sample <shoal.distributed.sampler.DistNeighborSampler.sample>`
runs its hop's exchanges (the requests, then the counts and the picks that answer them) for
one batch: every batch costs each rank ``3 L`` collectives or more, each a wait for the
slowest rank (DistDGL, Zheng et al., IA3 2020, Section 3.2, samples a batch at a time).
:func:`sample_chunk` draws hop ``h`` of a chunk of batches at once: the frontiers of all of
them go to their owners in one request, tagged by batch through a matrix of counts per
(rank, batch), and the answers come back in one exchange each. Every row draws from its own
batch's stream at its position among its batch's rows (``_kernels._fill_keyed``), so each
batch equals the one :meth:`sample` draws alone; the relabelling and the blocks are per
batch, as in :class:`~shoal.sample.base.BlockSampler`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from shoal.distributed.comm import exchange
from shoal.distributed.feature_store import owner_of
from shoal.distributed.segments import gather_segments, scatter_segments, segment_sums
from shoal.graph.blocks import MiniBatch
from shoal.sample import _kernels as K
from shoal.sample.base import HopEdges, assemble_blocks, hop_rowptr

__all__ = ["CHUNK_BYTES", "ChunkSampler", "chunk_batches", "sample_chunk"]


class ChunkSampler(Protocol):
    """What a chunk is sampled with: a
    :class:`~shoal.distributed.sampler.DistNeighborSampler`, named here by the members a
    chunk uses, not imported (that module imports this one)."""

    num_nodes: int
    rank: int
    world_size: int
    group: Any
    stats: Any
    part_offsets: np.ndarray
    part_to_rank: np.ndarray
    _ids: Any
    _hop: int
    _part_deg: dict | None

    def _sample_owned(self, ids, fanout, key, ex=None, segments=None) -> tuple: ...

    def _own_degrees(self, ids: np.ndarray) -> np.ndarray: ...

    def _empty_picks(self) -> np.ndarray: ...

    def _degrees_of(self, n_id: np.ndarray) -> np.ndarray: ...


#: memory a chunk's arrays may take while it is sampled (default 24 MiB: 4 batches of 1024
#: seeds at fanouts 10,5), counted as :data:`ENTRY_BYTES` per entry its batches may draw:
#: the batches of a group are sampled in chunks of this size, each chunk's exchanges shared
#: by its batches. Like one batch's arrays when batches are sampled one by one, it is part
#: of the process's working memory (the plan's reserve), not of the group's entries
CHUNK_BYTES = 24 << 20
#: bytes a drawn entry takes while its chunk is sampled: the pick and its degree, as sent and
#: as received, its column, its destination and its edge (an upper bound)
ENTRY_BYTES = 96
#: the stream a rank serves its peers' requests from, beside its own rows' (``_draw_hop``'s)
SERVED = np.uint64(0x5BD1E995)


def chunk_batches(fanouts: Sequence[int], batch_size: int) -> int:
    """Batches of ``batch_size`` seeds sampled together in :data:`CHUNK_BYTES` (at least 1;
    an unbounded hop counted as 64 neighbours a node)."""
    entries, per_seed = 0, 1
    for f in fanouts:
        per_seed *= f if f > 0 else 64
        entries += per_seed
    return max(1, CHUNK_BYTES // max(ENTRY_BYTES * entries * int(batch_size), 1))


class _Batch:
    """One batch's state between hops: its nodes (seeds first), their degrees with local
    tables, its hops' edges."""

    def __init__(self, seeds: np.ndarray, seed: int) -> None:
        self.seeds = seeds
        self.seed = seed
        self.nodes = seeds.copy()
        self.deg = np.empty(len(seeds), np.float32)
        self.hops: list[HopEdges] = []


def sample_chunk(
    s: ChunkSampler,
    batches: Sequence[tuple[np.ndarray, int]],
    fanouts: Sequence[int],
    *,
    blocks: bool = True,
) -> list[MiniBatch]:
    """``[s.sample(seeds, seed, fanouts=fanouts) for seeds, seed in batches]``, the batches'
    hops drawn together (module docstring); collective: every rank passes as many batches.
    Untyped, without exclusions. ``blocks`` False: the last hop is only drawn (its owners
    note what a group's pass reads) and nothing is returned."""
    bs = [_Batch(_checked(s, seeds), int(seed)) for seeds, seed in batches]
    for hop, f in enumerate(fanouts):
        s._hop = hop
        noted = hop == len(fanouts) - 1 and not blocks
        drawn = _draw(s, bs, hop, f, answer=not noted)
        if noted:
            return []
        picked, pdeg, rowptr, start = drawn
        for j, b in enumerate(bs):
            a, z = int(start[j]), int(start[j + 1])
            lo, hi = int(rowptr[a]), int(rowptr[z])
            part = None if pdeg is None else pdeg[lo:hi]
            _relabel(s, b, picked[lo:hi], rowptr[a : z + 1] - lo, part)
    return [_assemble(s, b) for b in bs]


def _draw(s: ChunkSampler, bs: list[_Batch], hop: int, fanout: int, answer: bool):
    """Hop ``hop`` of every batch of ``bs`` (collective): ``(picked, their degrees or None,
    rowptr, each batch's first frontier row)`` over the batches' frontiers back to back,
    each frontier node's degree noted in its batch; without ``answer`` the owners only draw
    (None)."""
    keys = np.array(
        [K._stream_key(np.uint64(b.seed & 0xFFFFFFFFFFFFFFFF), np.uint64(hop)) for b in bs],
        dtype=np.uint64,
    )
    n = np.array([len(b.nodes) for b in bs], np.int64)
    frontier = np.concatenate([b.nodes for b in bs]) if bs else np.empty(0, np.int64)
    seg = np.repeat(np.arange(len(bs), dtype=np.int64), n)
    owners = s.part_to_rank[owner_of(s.part_offsets, frontier)]
    local = np.flatnonzero(owners == s.rank)
    lc, lp = s._sample_owned(frontier[local], fanout, keys, segments=seg[local])
    counts = np.zeros(len(frontier), np.int64)
    counts[local] = lc
    deg = np.zeros(len(frontier), np.float32) if s._part_deg is not None else None
    if deg is not None:
        deg[local] = s._own_degrees(frontier[local])
    remote = np.empty(0, np.int64)
    rc, rp = np.empty(0, np.int64), s._empty_picks()
    if s.world_size > 1:
        remote = np.flatnonzero(owners != s.rank)
        remote = remote[np.argsort(owners[remote], kind="stable")]
        got = _ask(s, frontier, seg, owners, remote, len(bs), fanout, keys, answer)
        if got is None:
            return None
        rc, rp = got
        if deg is not None:
            deg[remote] = rc[:, 1]
            rc = np.ascontiguousarray(rc[:, 0])
        counts[remote] = rc
    elif not answer:
        return None
    rowptr = hop_rowptr(counts, len(frontier))
    picked = np.empty(int(rowptr[-1]), np.int64)
    pdeg = np.empty(int(rowptr[-1]), np.int64) if deg is not None else None
    _lay_out(picked, pdeg, rowptr, local, lc, lp, remote, rc, rp)
    start = np.zeros(len(bs) + 1, np.int64)
    np.cumsum(n, out=start[1:])
    if deg is not None:
        for j, b in enumerate(bs):
            b.deg[: n[j]] = deg[start[j] : start[j + 1]]
    return picked, pdeg, rowptr, start


def _checked(s: ChunkSampler, seeds: np.ndarray) -> np.ndarray:
    """``seeds`` as int64 in the id space (their uniqueness: at the first relabelling)."""
    seeds = np.asarray(seeds, dtype=np.int64)
    if seeds.size and (seeds.min() < 0 or seeds.max() >= s.num_nodes):
        bad = int(seeds[(seeds < 0) | (seeds >= s.num_nodes)][0])
        raise ValueError(f"seed node {bad} is out of range [0, {s.num_nodes})")
    return seeds


def _ask(
    s: ChunkSampler,
    frontier: np.ndarray,
    seg: np.ndarray,
    owners: np.ndarray,
    remote: np.ndarray,
    nb: int,
    fanout: int,
    keys: np.ndarray,
    answer: bool,
) -> tuple[np.ndarray, np.ndarray] | None:
    """The hop's requests of all batches in one exchange (``remote``: the frontier rows
    others own, by owner then batch); the owners serve each batch's requests in the order
    :meth:`sample` would (by requesting rank), and answer (counts, picks) in the requests'
    order; without ``answer`` the owners only draw (a pass noting positions)."""
    world, rank = s.world_size, s.rank
    # per (owner, batch) how many rows this rank asks; each owner learns its column
    asks = np.bincount(owners[remote] * nb + seg[remote], minlength=world * nb).reshape(world, nb)
    peers = np.ones(world, np.int64)
    peers[rank] = 0
    got, _ = exchange(np.delete(asks, rank, axis=0), peers, s.stats, s.group, recv_counts=peers)
    asked = np.zeros((world, nb), np.int64)
    asked[np.arange(world) != rank] = got.numpy().reshape(world - 1, nb)
    send_counts = asks.sum(axis=1)
    req_counts = asked.sum(axis=1)
    req, _ = exchange(frontier[remote], send_counts, s.stats, s.group, recv_counts=req_counts)
    req = req.numpy()
    # by batch, then requesting rank: each batch's requests as sample() receives them
    req_seg = np.repeat(np.tile(np.arange(nb, dtype=np.int64), world), asked.ravel())
    by_batch = np.argsort(req_seg, kind="stable")
    sc, sp = s._sample_owned(req[by_batch], fanout, keys ^ SERVED, segments=req_seg[by_batch])
    if not answer:
        return None
    if s._part_deg is not None:  # each count with the requested node's degree
        sc = np.stack([sc, s._own_degrees(req[by_batch]).astype(np.int64)], axis=1)
        c = sc[:, 0]
    else:
        c = sc
    # back in the requests' order
    back = np.empty_like(by_batch)
    back[by_batch] = np.arange(len(by_batch))
    sp = gather_segments(sp, hop_rowptr(c, len(c)), back)
    sc = sc[back]
    c = c[back]
    rc, _ = exchange(sc, req_counts, s.stats, s.group, recv_counts=send_counts)
    rc = rc.numpy()
    rcounts = rc[:, 0] if s._part_deg is not None else rc
    rp, _ = exchange(
        sp,
        segment_sums(c, req_counts),
        s.stats,
        s.group,
        recv_counts=segment_sums(rcounts, send_counts),
    )
    return rc, rp.numpy()


def _lay_out(picked, pdeg, rowptr, local, lc, lp, remote, rc, rp) -> None:
    """The hop's own and answered picks (and with local tables their degrees) in frontier
    order."""
    if pdeg is None:
        scatter_segments(picked, rowptr, local, lc, lp)
        scatter_segments(picked, rowptr, remote, rc, rp)
        return
    rp = rp.reshape(-1, 2)
    for col, out in ((0, picked), (1, pdeg)):
        scatter_segments(out, rowptr, local, lc, np.ascontiguousarray(lp[:, col]))
        scatter_segments(out, rowptr, remote, rc, np.ascontiguousarray(rp[:, col]))


def _relabel(
    s: ChunkSampler,
    b: _Batch,
    picked: np.ndarray,
    rowptr: np.ndarray,
    pdeg: np.ndarray | None,
) -> None:
    """Batch-local ids for the hop's picks of ``b`` (new nodes appended in order of first
    appearance, as :meth:`BlockSampler._sample_hops` gives them), its hop's edges kept."""
    n, m = len(b.nodes), len(picked)
    ids = s._ids
    nodes = np.empty(n + m, np.int64)
    dup = ids.seed(b.nodes, nodes)
    if dup >= 0:  # (only seeds can repeat: later nodes are the map's own)
        raise ValueError(f"seeds must be unique; node {int(b.nodes[dup])} appears twice")
    col = np.empty(m, np.int64)
    n_new = n
    try:
        n_new = ids.relabel(picked, m, nodes, n, col)
    finally:
        ids.reset(nodes, n_new)
    counts = np.diff(rowptr)
    dst = np.repeat(np.arange(n, dtype=np.int64), counts)
    b.hops.append((np.stack([col, dst]), rowptr.copy(), n_new, n))
    b.nodes = nodes[:n_new]
    if pdeg is not None:
        deg = np.empty(n_new, np.float32)
        deg[:n] = b.deg[:n]
        deg[col] = pdeg
        b.deg = deg


def _assemble(s: ChunkSampler, b: _Batch) -> MiniBatch:
    n_id = b.nodes.copy()
    deg = b.deg[: len(n_id)].copy() if s._part_deg is not None else s._degrees_of(n_id)
    return assemble_blocks(b.hops, n_id, deg, len(b.seeds), True)
