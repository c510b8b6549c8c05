"""Served layers whose message is the input row: every target pulls its sources' rows.

The sweep (:mod:`shoal.distributed.served`) buckets every in-edge of a block by (step,
owner), numbers each bucket's sources, and scatter-adds each edge's message when its step
comes: ~10 bytes and two passes per in-edge before a row is added. When a layer's message is
its input row itself (:attr:`SumLayer.linear` without a ``scale``, no ``pre``, as GraphSAGE's
and GIN's sums), no message needs computing, so no edge needs bucketing: a block's in-edges
are renumbered once to their sources' served indices and kept sorted per owner, one cursor
per target and owner; every rank then sweeps its own rows in steps as the sweep does,
reading in each step only the rows its block needs and those its peers asked for (asked
once per round, the pull of DistDGL's KVStore, Zheng et al., IA3 2020, Sec. III-C, under
its owner-compute rule, Sec. III-A), and every target pulls the step's rows of its sources
from the read and received buffers, moving its cursors on
(:func:`~shoal.training._kernels.pull_chunk_kernel`, the single-process chunked pull). A
step's rows asked by the peers leave before the rank pulls its own (an asynchronous
all-to-all): the exchange runs while the rank pulls, and the peers' rows are pulled after.
Per in-edge it holds one id (4 bytes under 2**31 nodes): blocks are larger, rounds fewer.

Same outputs as the sweep within float tolerance (sums run in another order).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from shoal.distributed import _served_kernels as SK
from shoal.distributed.comm import CommStats, all_to_all_rows, reduced
from shoal.distributed.runtime import DistContext
from shoal.nn.base import SumLayer
from shoal.rows import _kernels as RK
from shoal.training import _kernels as BK
from shoal.training.blocked import (
    _in_edges,
    _read_ahead,
    _read_only,
    id_dtype,
)
from shoal.utils.memory import huge_empty, huge_zeros

__all__ = ["PULL_ROUNDS", "pullable", "pulled_layer", "step_rows"]

log = logging.getLogger(__name__)

#: whether layers whose message is the row are pulled (default True; False sweeps them as
#: every other layer: the ablation, and how tests exercise the sweep on such layers)
PULL_ROUNDS = True
#: steps read ahead of the one being pulled (one buffer read while the other is pulled)
READ_AHEAD = 1
#: a step's read buffer at most (default 1 GiB; :data:`STEP_SHARE` bounds all of a step's
#: buffers): fewer steps, fewer visits of every target's cursors (larger steps
#: pulled faster: docs/measurements.md#pulled-layers-no-edge-bucketed-session-of-2026-12-01)
STEP_BYTES = 1 << 30
#: a step's buffers take at most 1 / STEP_SHARE of the working memory (default 8, the
#: sweep's; 4 measured alike in 4 GiB at the quarter: docs/measurements.md)
STEP_SHARE = 8
#: bytes per needed source while a round is planned: its local id, its served index and
#: its offset among its owner's rows (at most; 4 bytes each under 2**31 nodes)
SOURCE_BYTES = 12


def pullable(sl: SumLayer, pre) -> bool:
    """Whether the layer is pulled (the same answer on every rank)."""
    return PULL_ROUNDS and sl.linear and sl.scale is None and pre is None


def _row_bytes(dim: int, size: int, world: int) -> int:
    """Bytes per row of a step: the read buffers, those sent and received (one range of each
    peer at most) and a peer's laid out by offset, float32 rows' read before they are laid
    out (:class:`_DenseRows`), and the step's marks."""
    peers = max(world - 1, 1)
    return size * dim * (READ_AHEAD + 2 + 2 * peers + (size == 4)) + 1


def step_rows(budget: int, dim: int, size: int, world: int) -> int:
    """Rows per step (before the ranks agree on the smallest): buffers of ``1 /``
    :data:`STEP_SHARE` of ``budget``, a read buffer of at most :data:`STEP_BYTES`."""
    rows = budget // (STEP_SHARE * _row_bytes(dim, size, world))
    return max(1, min(rows, STEP_BYTES // max(size * dim, 1)))


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
        mine = np.union1d(core, want[me]).astype(off) if len(want[me]) else core
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


def _two_phase_blocks(indptr, targets, phases, budget: int) -> list:
    """Consecutive blocks of ``targets`` each of whose ``phases`` ``(per target, per
    in-edge)`` bytes stay within ``budget`` (at least one target a block)."""
    d = np.asarray(indptr[targets + 1], np.int64) - np.asarray(indptr[targets], np.int64)
    costs = [np.cumsum(d * e + t) for t, e in phases]
    bounds = [0]
    while bounds[-1] < len(targets):
        a = bounds[-1]
        b = min(
            int(np.searchsorted(c, (c[a - 1] if a else 0) + budget, side="right")) for c in costs
        )
        bounds.append(max(b, a + 1))
    return list(zip(bounds[:-1], bounds[1:], strict=True))


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


def _cuts(ids: np.ndarray, steps: int, R: int) -> np.ndarray:
    """Where each step's range of ``R`` rows starts among the sorted ``ids``."""
    return np.searchsorted(ids, np.arange(steps + 1, dtype=np.int64) * R)


def _served_edges(p, block, edges, layout, halo_served, me: int, total: int):
    """The block's in-edges renumbered to their sources' served indices, each list sorted
    within each owner's run, and the runs: ``(ptr, ids, cur, end)`` with ``cur[o][i]`` /
    ``end[o][i]`` target ``i``'s entries from owner ``o``."""
    ptr, ids = edges
    if ids.dtype.itemsize < np.dtype(id_dtype(total)).itemsize:
        ids = ids.astype(id_dtype(total))
    SK._to_served(ids, p.num_core, layout.me_base(p, me), halo_served[p.index])
    W = len(layout.rank_offset) - 1
    cur = np.empty((W, len(block)), np.int64)
    end = np.empty((W, len(block)), np.int64)
    if not SK._owner_runs(ptr, ids, layout.rank_offset, cur, end):
        BK._sort_lists(ptr, ids)  # (a rank of several parts: halo ids by global id)
        SK._owner_runs(ptr, ids, layout.rank_offset, cur, end)
    return ptr, ids, cur, end


class _DenseRows:
    """This rank's rows of a step's sorted ids, each at its offset in the step's range of
    ``R`` rows (``out[u % R]``: the pull finds a row without a slot lookup, and the rows
    read lie densely), as stored 16-bit bits (int16, as the sweep reads them) or as float32."""

    def __init__(self, sources, stored, R: int) -> None:
        self.sources, self.stored, self.R = sources, stored, R

    def read(self, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        if self.sources is None or not len(ids):
            return out.view(np.int16) if self.stored is not None else out
        dest = ids - (int(ids[0]) // self.R) * self.R
        if self.stored is not None:
            return self.sources.read_stored(ids, out, dest).view(np.int16)
        out[dest] = self.sources.read(ids)
        return out


class _Pull:
    """Every target adds the rows of one owner's step range to its accumulator."""

    def __init__(self, code: int, acc: np.ndarray) -> None:
        self.kernel = BK.pull_chunk_kernel(code)
        self.w = _read_only(np.empty((0, 1), np.float32))
        self.acc = acc

    def __call__(self, cur, end, ids, lo: int, hi: int, slot, rows) -> None:
        self.kernel(cur, end, ids, lo, hi, _read_only(slot), _read_only(rows), self.w, self.acc)


def _round(
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
        ptr, ids, cur, end = _served_edges(p, block, edges, layout, halo_served, me, total)
        del edges
        acc = huge_zeros((len(block), width), np.float32)
        own = np.empty((len(block), dim), mtype)
        end = _read_only(end)
        ids = _read_only(ids)
        pull = _Pull(0 if stored is None else (1 if stored == np.float16 else 2), acc)
    t0 = clock.add("renumber", t0)
    targets = block + (layout.me_base(p, me) - layout.rank_offset[me]) if has else block
    cm, ct = _cuts(plan.mine, steps, R), _cuts(targets, steps, R)
    ca = [_cuts(plan.asked[r], steps, R) for r in range(W)]
    cw = [_cuts(plan.want[o], steps, R) for o in range(W)]
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
    for (_, s), h in _read_ahead(pool, _DenseRows(sources, stored, R), None, items(), bufs):
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
                dense = _buffer(spare, "dense", R, dim, mtype)
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
    send = _buffer(spare, "send", sum(send_n), dim, mtype)
    k = 0
    for r in range(W):
        if send_n[r]:
            pos = plan.asked[r][ca[r][s] : ca[r][s + 1]] - lo
            RK._gather_rows(rows, pos, send[k : k + send_n[r]])
            k += send_n[r]
    recv = _buffer(spare, "recv", sum(recv_n), dim, mtype)
    if mtype != np.float32:  # as bytes: gloo has no 16-bit unsigned type
        work = all_to_all_rows(
            send.view(np.uint8), recv.view(np.uint8), send_n, recv_n, async_op=True
        )
    else:
        work = all_to_all_rows(send, recv, send_n, recv_n, async_op=True)
    return work, recv, send_n, recv_n


def _buffer(spare: dict, name: str, rows: int, cols: int, dtype) -> np.ndarray:
    """A reused ``(rows, cols)`` buffer kept in ``spare``, grown when needed."""
    buf = spare.get(name)
    if buf is None or buf.shape[0] < rows or buf.shape[1] != cols or buf.dtype != dtype:
        buf = spare[name] = huge_empty((max(rows, 1), cols), dtype)
    return buf[:rows]


@torch.no_grad()
def pulled_layer(
    sl: SumLayer,
    parts: list,
    graphs: dict[int, tuple],
    todo: dict[int, np.ndarray],
    layout,
    halo_served: dict[int, np.ndarray],
    ctx: DistContext,
    sources,
    stored,
    *,
    dim: int,
    budget: int,
    stats: CommStats | None,
    clock,
    finish: Callable,
) -> None:
    """One layer of :func:`~shoal.distributed.served.served_layer` for a layer that
    :func:`pullable` admits (module docstring); collective. ``sources``: this rank's rows
    (None without parts); ``stored``: the 16-bit dtype they are read, sent and summed as
    (None: float32); ``finish(p, a, block, acc, own)`` finishes a block's targets."""
    W, me = ctx.world_size, ctx.rank
    size = 4 if stored is None else np.dtype(stored).itemsize
    R = reduced(step_rows(budget, dim, size, W), W, dist.ReduceOp.MIN)
    R = max(1, min(R, int(layout.rank_rows.max(initial=1))))
    steps = int(max(-(-int(n) // R) for n in layout.rank_rows)) if len(layout.rank_rows) else 0
    held = R * _row_bytes(dim, size, W)
    # beside the blocks: a round's marks (a byte per local id of a part) and the ids the
    # peers ask of this rank (every row of it at most)
    local = max((p.num_core + len(halo_served[p.index]) for p in parts), default=0)
    off = np.dtype(id_dtype(int(layout.rank_rows.max(initial=1)))).itemsize
    fixed = local + off * int(layout.rank_rows[me] if parts else 0)
    free = max(budget - held - fixed, 1)
    edge = np.dtype(id_dtype(int(layout.rank_offset[-1]))).itemsize
    # while a block is planned (its in-edges, their distinct sources in three arrays at most
    # at once) and while it is pulled (its in-edges and sources' ids, per target its list
    # start, cursors, accumulator and own row): each phase within the working memory
    planned = (8, edge + SOURCE_BYTES)
    pulling = (8 + 16 * W + 4 * sl.width + size * dim, edge + off)
    blocks = []
    for p in parts:
        ids = np.asarray(todo[p.index])
        for a, b in _two_phase_blocks(graphs[p.index][0], ids, (planned, pulling), free):
            blocks.append((p, a, ids[a:b]))
    rounds = reduced(len(blocks), W, dist.ReduceOp.MAX)
    log.info(
        "layer of width %d: %d targets in %d block(s) of at most %d, %d round(s) over the "
        "ranks, each target pulling its sources' rows%s as each round sweeps this rank's %d "
        "rows in %d steps of %d rows (%.0f MiB of working memory, %.0f MiB of it buffers)",
        sl.width,
        sum(len(todo[p.index]) for p in parts),
        len(blocks),
        max((len(b[2]) for b in blocks), default=0),
        rounds,
        "" if stored is None else f" as stored {np.dtype(stored).name}",
        int(layout.rank_rows[me]) if len(layout.rank_rows) else 0,
        steps,
        R,
        budget / 2**20,
        held / 2**20,
    )
    read = np.float32 if stored is None else stored
    bufs = [huge_empty((R, dim), read) for _ in range(READ_AHEAD + 1)]
    spare: dict = {}
    pool = ThreadPoolExecutor(1, thread_name_prefix="shoal-pulled-read")
    try:
        for k in range(rounds):
            p, a, block = blocks[k] if k < len(blocks) else (None, 0, np.empty(0, np.int64))
            block = np.asarray(block, np.int64)
            acc, own = _round(
                p,
                block,
                graphs,
                layout,
                halo_served,
                ctx,
                sources,
                stored,
                bufs,
                spare,
                pool,
                R=R,
                steps=steps,
                width=sl.width,
                stats=stats,
                clock=clock,
            )
            if p is not None and len(block):
                finish(p, a, block, acc, own)
            del acc, own  # freed before the next round's block is read
        log.info("layer of width %d done: %s", sl.width, clock)
    finally:
        pool.shutdown(wait=True)
