"""A pulled round whose owners sum (:data:`shoal.distributed.pulled.PARTIAL_SUMS`, the
default): a round's lists go, owner by owner, to the ranks that own their sources; each rank
pulls every rank's lists over its own rows alone and sends each peer its targets' partial
sums once, at the round's end (NeutronStar's mirrors summing for their master, Wang et al.,
SIGMOD 2022, Sec. 4.2, Fig. 7)."""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.distributed as dist

from shoal.distributed import _served_kernels as SK
from shoal.distributed.comm import CommStats, all_to_all_rows
from shoal.distributed.pulled_steps import DenseRows, buffer, cuts, packed, served_edges, tail_slots
from shoal.distributed.runtime import DistContext
from shoal.rows import _kernels as RK
from shoal.training import _kernels as BK
from shoal.training.blocked import RowWriter, _in_edges, _read_ahead, _read_only, id_dtype
from shoal.utils.memory import huge_zeros

__all__ = ["SUM_CHUNK", "sums_round"]

#: targets per chunk of partial sums sent back (default 8192: 4 MiB of 128-wide float32 rows
#: a peer)
SUM_CHUNK = 1 << 13


def sums_round(
    p,
    block: np.ndarray,
    graphs,
    layout,
    halo_served,
    ctx: DistContext,
    sources,
    stored,
    bufs: list,
    spare: dict,
    pool,
    *,
    R: int,
    steps: int,
    width: int,
    stats: CommStats | None,
    clock,
    spill=None,
):
    """One round of ``block`` (this rank's targets in ``p``; empty: it only serves its
    peers); collective at its start (the lists) and end (the partial sums) only: between
    them this rank sweeps its own rows alone, ``R`` rows a step, ``steps`` steps, reading
    into ``bufs`` (``spare``: reused exchange buffers by name). Returns the block's
    accumulators (``width`` float32 columns, every owner's sum added) and its targets' own
    rows (16-bit bits when ``stored``, as the sweep's), None without a block; with
    ``spill(rows, cols, dtype)`` the own rows are written, step by step, to that file-backed
    scratch array (default None: kept in memory)."""
    W, me = ctx.world_size, ctx.rank
    t0 = time.perf_counter()
    mtype = np.uint16 if stored is not None else np.float32
    dim = bufs[0].shape[1]
    has = p is not None and len(block) > 0
    off = id_dtype(int(layout.rank_rows.max(initial=1)))
    counts = np.zeros((W, len(block)), np.int64)
    flat = np.empty(0, off)
    if has:
        indptr, indices, _ = graphs[p.index]
        edges = _in_edges(indptr, indices, block, always=True)
        t0 = clock.add("plan", t0)
        total = int(layout.rank_offset[-1])
        _, ids, cur, end = served_edges(p, block, edges, layout, halo_served, me, total)
        del edges
        np.subtract(end, cur, out=counts)
        flat = np.empty(int(counts.sum()), off)
        # the peers' entries in rank order, then this rank's: the send buffer is a prefix
        order = np.array([o for o in range(W) if o != me] + [me], np.int64)
        SK._owner_lists(ids, cur, end, order, layout.rank_offset, flat)
        del ids, cur, end
    t0 = clock.add("renumber", t0)
    lists = _exchange_lists(counts, flat, ctx, stats, off)
    del counts, flat
    t0 = clock.add("exchange", t0)
    need = np.zeros(int(layout.rank_rows[me]) if len(layout.rank_rows) else 0, np.bool_)
    for _, ids in lists:
        SK._mark_sources(ids, need)
    targets = block + (layout.me_base(p, me) - layout.rank_offset[me]) if has else block
    need[targets] = True
    kernel = BK.pull_chunk_kernel(0 if stored is None else (1 if stored == np.float16 else 2))
    w = _read_only(np.empty((0, 1), np.float32))
    accs = [huge_zeros((len(ptr) - 1, width), np.float32) for ptr, _ in lists]
    curs = [ptr[:-1].copy() for ptr, _ in lists]
    own = writer = None
    if has:
        own = np.empty((len(block), dim), mtype) if spill is None else spill(len(block), dim, mtype)
        writer = RowWriter(own) if spill is not None else None
    ct = cuts(targets, steps, R)
    t0 = clock.add("plan", t0)

    def items():  # each step's rows to read, ascending
        for s in range(steps):
            lo = s * R
            yield np.flatnonzero(need[lo : lo + R]) + lo, s

    none = _read_only(np.empty(0, np.int64))  # no slots: rows lie densely by offset
    reads = _read_ahead(pool, DenseRows(sources, stored, R), None, items(), bufs)
    for k, ((got, s), h) in enumerate(reads):
        t0 = clock.add("read wait", t0)
        rows = h.numpy().view(np.uint16) if stored is not None else h.numpy()
        lo = s * R
        slot = slots = none
        buf = bufs[k % len(bufs)]  # the buffer _read_ahead read item k into
        if packed(len(got), R, buf.shape[1] * buf.itemsize):  # rows in the ids' order
            slots = tail_slots(buf, R)  # a row per offset, past the rows read
            slots[got - lo] = np.arange(len(got))
            slot = _read_only(slots)
        if has and ct[s + 1] > ct[s]:
            a, b = int(ct[s]), int(ct[s + 1])
            at = targets[a:b] - lo
            dst = own[a:b] if writer is None else buffer(spare, "own rows", b - a, dim, mtype)
            RK._gather_rows(rows, at if slot is none else slots[at], dst)
            if writer is not None:
                writer.write(np.arange(a, b, dtype=np.int64), dst)
        t0 = clock.add("own rows", t0)
        rows = _read_only(rows)
        for r, (ptr, ids) in enumerate(lists):
            if len(ids):
                end = _read_only(ptr[1:])
                kernel(curs[r], end, ids, lo, lo + R, slot, rows, w, accs[r])
        t0 = clock.add("pull", t0)
    if writer is not None:
        writer.close()
    acc = _gather_sums(accs, me, ctx, spare, stats)
    clock.add("exchange", t0)
    return (acc if has else None), own


def _exchange_lists(counts: np.ndarray, flat: np.ndarray, ctx: DistContext, stats, off):
    """Every rank's block's in-edges owned by this rank (collective): ``counts[o, i]``,
    target ``i``'s entries owned by rank ``o``, ``flat`` the entries as offsets among their
    owners' rows, the peers' in rank order, then this rank's. Returns ``(ptr, ids)`` per
    rank ``r``: the lists of ``r``'s block's targets over this rank's rows (read-only)."""
    W, me = ctx.world_size, ctx.rank
    n = counts.shape[1]
    m = counts.sum(axis=1)
    peers = [o for o in range(W) if o != me]
    lists: list = [None] * W
    if W == 1:
        lists[me] = (_ptr(counts[me]), _read_only(flat))
        return lists
    sizes = torch.tensor([[n, int(m[o])] for o in range(W)], dtype=torch.int64)
    got = torch.empty_like(sizes)
    dist.all_to_all_single(got, sizes)
    got_n, got_m = got[:, 0].tolist(), got[:, 1].tolist()
    got_n[me] = got_m[me] = 0
    send_c = np.ascontiguousarray(counts[peers]).reshape(-1)
    recv_c = np.empty(sum(got_n), np.int64)
    all_to_all_rows(send_c, recv_c, [0 if o == me else n for o in range(W)], got_n)
    recv = np.empty(sum(got_m), off)
    send_m = [0 if o == me else int(m[o]) for o in range(W)]
    all_to_all_rows(flat[: int(m[peers].sum())], recv, send_m, got_m)
    if stats is not None:
        stats.tally(sum(send_m), len(recv), recv.itemsize)
    # this rank's own entries copied out of the send buffer, which the caller then frees:
    # while pulling, a rank holds its own block's entries over its rows and the peers'
    # over its rows (about one id per in-edge of a block, the plan's pulling phase), not
    # the entries it sent as well
    lists[me] = (_ptr(counts[me]), _read_only(flat[int(m[peers].sum()) :].copy()))
    a = b = 0
    for r in peers:
        lists[r] = (_ptr(recv_c[a : a + got_n[r]]), _read_only(recv[b : b + got_m[r]]))
        a, b = a + got_n[r], b + got_m[r]
    return lists


def _ptr(counts: np.ndarray) -> np.ndarray:
    """List starts (and the end) of lists of ``counts`` entries."""
    ptr = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr


def _gather_sums(accs: list, me: int, ctx: DistContext, spare: dict, stats) -> np.ndarray:
    """This rank's block's accumulators, each peer's partial sums added (collective: the
    peers' accumulators sent to them, :data:`SUM_CHUNK` rows of each at a time)."""
    W = ctx.world_size
    acc = accs[me]
    if W == 1:
        return acc
    width = acc.shape[1]
    sizes = [len(a) for a in accs]  # every rank's block (the same on every rank)
    n_max = max(sizes)
    peers = [o for o in range(W) if o != me]
    for a in range(0, n_max, SUM_CHUNK):
        send_n = [0 if r == me else max(0, min(SUM_CHUNK, sizes[r] - a)) for r in range(W)]
        k = max(0, min(SUM_CHUNK, len(acc) - a))
        recv_n = [0 if o == me else k for o in range(W)]
        send = buffer(spare, "sums out", sum(send_n), width, np.float32)
        at = 0
        for r in peers:
            send[at : at + send_n[r]] = accs[r][a : a + send_n[r]]
            at += send_n[r]
        recv = buffer(spare, "sums in", sum(recv_n), width, np.float32)
        all_to_all_rows(send, recv, send_n, recv_n)
        if stats is not None:
            stats.tally(sum(send_n), sum(recv_n), 4 * width)
        for j in range(len(peers)):
            acc[a : a + k] += recv[j * k : (j + 1) * k]
    return acc
