"""A pulled round that sends rows (:data:`shoal.distributed.pulled.PARTIAL_SUMS` false, the
ablation): every step, each rank sends the rows of its step's range the peers' blocks need
(asked once per round: the pull of DistDGL's KVStore, Zheng et al., IA3 2020, Sec. III-C,
under its owner-compute rule, Sec. III-A), the ranks stepping together; a step's rows leave
before the rank pulls its own (an asynchronous all-to-all), the peers' rows are pulled after.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from shoal.distributed import _served_kernels as SK
from shoal.distributed.comm import CommStats, all_to_all_rows
from shoal.distributed.pulled_steps import DenseRows, buffer, cuts, served_edges
from shoal.distributed.runtime import DistContext
from shoal.rows import _kernels as RK
from shoal.training import _kernels as BK
from shoal.training.blocked import _in_edges, _read_ahead, _read_only, id_dtype
from shoal.utils.arrays import union_sorted
from shoal.utils.memory import huge_zeros

__all__ = ["rows_round"]


@dataclass
class _Plan:
    """A rank's round: its block's sources split into its own rows (served-local, sorted:
    ``mine``) and the rows it asks each owner for (``want[o]``, the owner's local rows,
    sorted); ``asked[r]``: the rows rank ``r`` asks of this one."""

    mine: np.ndarray
    want: list
    asked: list


def _plan(p, block, edges, layout, halo_served, ctx, stats) -> _Plan:
    """Mark the block's sources, split them by owner and ask the owners (collective)."""
    W, me = ctx.world_size, ctx.rank
    off = id_dtype(int(layout.rank_rows.max(initial=1)))  # offsets among a rank's rows
    empty = np.empty(0, off)
    want, mine = [empty] * W, empty
    if p is not None and len(block):
        hs = halo_served[p.index]
        mark = np.zeros(p.num_core + len(hs), np.bool_)
        SK._mark_sources(edges[1], mark)
        need = _marked(mark, id_dtype(len(mark)))
        del mark
        split = int(np.searchsorted(need, p.num_core))
        core = need[:split].astype(off)
        core += layout.me_base(p, me) - layout.rank_offset[me]
        served = hs[need[split:] - p.num_core]
        del need
        if len(served) > 1 and bool((served[1:] < served[:-1]).any()):
            served.sort()  # (already sorted when the halo ids are by one part's rows)
        cut = np.searchsorted(served, layout.rank_offset)
        want = [(served[cut[o] : cut[o + 1]] - layout.rank_offset[o]).astype(off) for o in range(W)]
        del served
        mine = union_sorted(core, want[me]).astype(off) if len(want[me]) else core
        want[me] = empty
    asked = [empty] * W
    if W > 1:
        counts = torch.tensor([len(w) for w in want], dtype=torch.int64)
        got_n = torch.empty_like(counts)
        dist.all_to_all_single(got_n, counts)
        recv_n = got_n.tolist()
        out = np.concatenate(want)
        got = np.empty(sum(recv_n), off)
        all_to_all_rows(out, got, [len(w) for w in want], recv_n)
        if stats is not None:
            stats.tally(len(out), len(got), got.itemsize)
        cut = np.concatenate([[0], np.cumsum(recv_n)])
        asked = [got[cut[r] : cut[r + 1]] for r in range(W)]
    return _Plan(mine, want, asked)


def _marked(mark: np.ndarray, dtype, step: int = 1 << 24) -> np.ndarray:
    """The positions of ``mark``'s true entries, ascending, as ``dtype`` (found ``step``
    entries at a time: no int64 array over all of them)."""
    out = np.empty(int(np.count_nonzero(mark)), dtype)
    at = 0
    for a in range(0, len(mark), step):
        got = np.flatnonzero(mark[a : a + step])
        out[at : at + len(got)] = got + a
        at += len(got)
    return out


class _Pull:
    """Every target adds the rows of one owner's step range to its accumulator."""

    def __init__(self, code: int, acc: np.ndarray) -> None:
        self.kernel = BK.pull_chunk_kernel(code)
        self.w = _read_only(np.empty((0, 1), np.float32))
        self.acc = acc

    def __call__(self, cur, end, ids, lo: int, hi: int, slot, rows) -> None:
        self.kernel(cur, end, ids, lo, hi, _read_only(slot), _read_only(rows), self.w, self.acc)


def rows_round(
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
):
    """One round (module docstring); collective. ``bufs``: the reused read buffers of ``R``
    rows, ``spare`` the reused send and receive buffers by name. Returns the block's
    accumulators and its targets' own rows (16-bit bits when ``stored``, as the sweep's)."""
    W, me = ctx.world_size, ctx.rank
    t0 = time.perf_counter()
    mtype = np.uint16 if stored is not None else np.float32
    dim = bufs[0].shape[1]
    has = p is not None and len(block) > 0
    edges = None
    if has:
        indptr, indices, _ = graphs[p.index]
        edges = _in_edges(indptr, indices, block, always=True)
    plan = _plan(p, block, edges, layout, halo_served, ctx, stats)
    t0 = clock.add("plan", t0)
    ptr = ids = cur = end = None
    acc = own = None
    if has:
        total = int(layout.rank_offset[-1])
        ptr, ids, cur, end = served_edges(p, block, edges, layout, halo_served, me, total)
        del edges
        acc = huge_zeros((len(block), width), np.float32)
        own = np.empty((len(block), dim), mtype)
        end = _read_only(end)
        ids = _read_only(ids)
        pull = _Pull(0 if stored is None else (1 if stored == np.float16 else 2), acc)
    t0 = clock.add("renumber", t0)
    targets = block + (layout.me_base(p, me) - layout.rank_offset[me]) if has else block
    cm, ct = cuts(plan.mine, steps, R), cuts(targets, steps, R)
    ca = [cuts(plan.asked[r], steps, R) for r in range(W)]
    cw = [cuts(plan.want[o], steps, R) for o in range(W)]
    mark = np.zeros(R, np.bool_)

    def items():  # each step's rows to read, ascending
        for s in range(steps):
            lo = s * R
            pieces = [plan.mine[cm[s] : cm[s + 1]], targets[ct[s] : ct[s + 1]]]
            pieces += [plan.asked[r][ca[r][s] : ca[r][s + 1]] for r in range(W) if r != me]
            for x in pieces:  # marks, not a sort: R entries a step
                mark[x - lo] = True
            off = np.flatnonzero(mark)
            mark[off] = False
            yield off + lo, s

    none = np.empty(0, np.int64)  # no slots: a step's rows lie densely by offset
    for (_, s), h in _read_ahead(pool, DenseRows(sources, stored, R), None, items(), bufs):
        t0 = clock.add("read wait", t0)
        rows = h.numpy().view(np.uint16) if stored is not None else h.numpy()
        lo = s * R
        if has and ct[s + 1] > ct[s]:
            RK._gather_rows(rows, targets[ct[s] : ct[s + 1]] - lo, own[ct[s] : ct[s + 1]])
        t0 = clock.add("own rows", t0)
        sent = _send(plan, ca, cw, s, lo, rows, spare, mtype, W, me) if W > 1 else None
        t0 = clock.add("messages", t0)
        if has and cm[s + 1] > cm[s]:  # while the peers' rows are on their way
            first = int(layout.rank_offset[me]) + lo
            pull(cur[me], end[me], ids, first, first + R, none, rows)
        t0 = clock.add("pull", t0)
        if sent is None:
            continue
        work, recv, send_n, recv_n = sent
        work.wait()
        t0 = clock.add("exchange", t0)
        if stats is not None:
            stats.tally(sum(send_n), sum(recv_n), dim * np.dtype(mtype).itemsize)
        k = 0
        for o in range(W):
            if recv_n[o]:  # laid out densely by offset, as this rank's own
                dense = buffer(spare, "dense", R, dim, mtype)
                at = plan.want[o][cw[o][s] : cw[o][s + 1]] - lo
                SK._scatter_rows(recv[k : k + recv_n[o]], at, dense)
                t0 = clock.add("place", t0)
                first = int(layout.rank_offset[o]) + lo
                pull(cur[o], end[o], ids, first, first + R, none, dense)
                k += recv_n[o]
        t0 = clock.add("pull", t0)
    return acc, own


def _send(plan: _Plan, ca, cw, s: int, lo: int, rows, spare: dict, mtype, W: int, me: int):
    """Start step ``s``'s exchange (collective): the rows each peer asked of this step's
    range gathered from ``rows`` (the step's read buffer, offset ``lo``) and sent while this
    rank pulls its own (the pulled layer's exchange overlaps its pull); ``(work handle,
    receive buffer, rows sent and received per rank)``."""
    dim = rows.shape[1]
    send_n = [0 if r == me else int(ca[r][s + 1] - ca[r][s]) for r in range(W)]
    recv_n = [0 if o == me else int(cw[o][s + 1] - cw[o][s]) for o in range(W)]
    send = buffer(spare, "send", sum(send_n), dim, mtype)
    k = 0
    for r in range(W):
        if send_n[r]:
            pos = plan.asked[r][ca[r][s] : ca[r][s + 1]] - lo
            RK._gather_rows(rows, pos, send[k : k + send_n[r]])
            k += send_n[r]
    recv = buffer(spare, "recv", sum(recv_n), dim, mtype)
    if mtype != np.float32:  # as bytes: gloo has no 16-bit unsigned type
        work = all_to_all_rows(
            send.view(np.uint8), recv.view(np.uint8), send_n, recv_n, async_op=True
        )
    else:
        work = all_to_all_rows(send, recv, send_n, recv_n, async_op=True)
    return work, recv, send_n, recv_n
