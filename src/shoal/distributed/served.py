"""Distributed blocked layers whose halo rows are served by their owners' sweeps.

A layer runs in *rounds*: each rank takes one block of its targets and tells each owner which
of its rows the block needs; every rank then sweeps **its own rows only** in steps of ``R``
rows (the same ``R`` everywhere), turns the rows asked for into messages (``pre``, then
:attr:`SumLayer.message <shoal.nn.SumLayer>` with the owner's degrees) and sends each peer
those it asked for (one all-to-all per step); the block is then finished as in
:func:`~shoal.training.blocked.blocked_layer`. It is the exchange of DistGNN's full-graph
layer (Md et al., SC 2021, Sec. 3) applied per block of targets under a memory budget
(MariusGNN's partition buffer, Waleffe et al., EuroSys 2023, Sec. 4); why and how it compares
with the stored halo: docs/distributed.md#evaluation-every-engine.

A layer whose message is its input row is pulled instead (:mod:`shoal.distributed.pulled`:
the same sweep of every rank's rows, no edge bucketed, each target pulling its sources'
rows from the step's buffers).

Ranks, not parts, own rows here: a rank's parts are its rows in part order (a *served index*
numbers every rank's rows, rank after rank). Same outputs as the stored-halo path for the same
weights, within float tolerance (messages are summed in another order).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.distributed as dist

from shoal.distributed import _served_kernels as SK
from shoal.distributed.comm import CommStats, all_to_all_rows, reduced
from shoal.distributed.feature_store import owner_of
from shoal.distributed.pulled import pullable, pulled_layer
from shoal.distributed.runtime import DistContext
from shoal.nn.base import SumLayer
from shoal.rows.opener import open_rows
from shoal.store.reader import Partition
from shoal.training import _kernels as BK
from shoal.training.blocked import (
    CHUNK_BYTES,
    SLICE_BYTES,
    LayerRows,
    RowWriter,
    _blocks,
    _in_edges,
    _read_ahead,
    id_dtype,
)
from shoal.utils.arrays import unique_sorted
from shoal.utils.mapped import file_of

__all__ = ["ServedLayout", "served_layer"]

log = logging.getLogger(__name__)


class ServedLayout:
    """Where every node's row is served from: ranks in order, each rank's parts in part
    order (``part_base[q]``: part ``q``'s first row among its rank's rows; ``rank_offset[r]``:
    rank ``r``'s first served index)."""

    def __init__(self, part_offsets: np.ndarray, part_to_rank: np.ndarray, world: int) -> None:
        self.part_offsets = np.asarray(part_offsets, np.int64)
        self.part_to_rank = np.asarray(part_to_rank, np.int64)
        sizes = np.diff(self.part_offsets)
        self.part_base = np.zeros(len(sizes), np.int64)
        rows = np.zeros(world, np.int64)
        for q, r in enumerate(self.part_to_rank):
            self.part_base[q] = rows[r]
            rows[r] += sizes[q]
        self.rank_rows = rows
        self.rank_offset = np.zeros(world + 1, np.int64)
        np.cumsum(rows, out=self.rank_offset[1:])

    def served_of(self, ids: np.ndarray, step: int = 1 << 20) -> np.ndarray:
        """Served index of global ``ids`` (in chunks of ``step``: no int64 temporaries over
        all of them), as :func:`~shoal.training.blocked.id_dtype` values."""
        out = np.empty(len(ids), id_dtype(int(self.rank_offset[-1])))
        for a in range(0, len(ids), step):
            g = np.asarray(ids[a : a + step], np.int64)
            q = owner_of(self.part_offsets, g)
            out[a : a + step] = (
                self.rank_offset[self.part_to_rank[q]] + self.part_base[q] + g
            ) - self.part_offsets[q]
        return out

    def me_base(self, part: Partition, rank: int) -> int:
        """Served index of ``part``'s first core row."""
        return int(self.rank_offset[rank] + self.part_base[part.index])


#: per in-edge of a block while its messages are added: its message's position (uint16:
#: a step has at most :data:`MAX_STEP_ROWS` rows) and its target's (int32), and at most one
#: distinct source asked of an owner and one asked by a peer (uint16 offsets in a range)
SERVED_EDGE_BYTES = 10
#: per in-edge of a block while it is bucketed: its source's offset (uint16) and its target
#: (int32), beside the edge itself when read from a file
BUCKETED_EDGE_BYTES = 6
#: rows of one sweep step at most: offsets within a step fit uint16
MAX_STEP_ROWS = 65535
#: the finishing slices take this fraction of the budget at most (reused buffers: their rows
#: are read while the previous slice is finished)
SLICE_SHARE = 256
#: offsets within a step
OFF = np.uint16
#: the 16-bit kinds rows may be read and sent as (:func:`_raw`), by numpy dtype character
_NAMES = {"e": "float16", "H": "bfloat16"}
#: steps read ahead of the one whose messages are exchanged (default 1: one buffer read
#: while the other's messages are sent and added). The ranks exchange in lockstep, so deeper
#: read-ahead might absorb one rank's slower moments; 2 and 3 steps measured no faster than 1
#: (docs/measurements.md#distributed-windows-and-the-served-sweep), so each extra step's
#: buffer is left to the blocks
READ_AHEAD = 1


class _Sweep:
    """The buffers of one layer's sweep: ``R`` rows per step read into two reused buffers
    (one filled while the other's messages are sent and added), finishing slices likewise;
    ``stored``: the rows' 16-bit dtype when they are read and sent as stored (:func:`_raw`)."""

    def __init__(self, budget: int, dim: int, width: int, R: int, stored=None) -> None:
        self.R = R
        self.stored = None if stored is None else np.dtype(stored)
        read = np.float32 if stored is None else stored
        self.range_bufs = [np.empty((R, dim), read) for _ in range(READ_AHEAD + 1)]
        piece = _slice_bytes(budget, dim, width)
        self.slice_rows = max(1, piece // (4 * max(dim, width, 1)))
        self.slice_bufs = [np.empty((self.slice_rows, dim), np.float32) for _ in range(2)]
        self.mark = np.full(R, -1, np.int64)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="shoal-served-read")
        self.bufs: dict[str, np.ndarray] = {}

    def buffer(self, name: str, rows: int, cols: int, dtype=np.float32) -> np.ndarray:
        """A reused ``(rows, cols)`` buffer of ``dtype`` (grown when needed)."""
        buf = self.bufs.get(name)
        if buf is None or buf.shape[0] < rows or buf.shape[1] != cols or buf.dtype != dtype:
            buf = self.bufs[name] = np.empty((max(rows, 1), cols), dtype)
        return buf[:rows]

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def _slice_bytes(budget: int, dim: int, width: int) -> int:
    """Bytes of one finishing slice's rows: ``budget / SLICE_SHARE``, at least one row and at
    most :data:`SLICE_BYTES`."""
    return min(SLICE_BYTES, max(budget // SLICE_SHARE, 4 * max(dim, width, 1)))


def _row_bytes(dim: int, width: int, world: int, itemsize: int = 4) -> int:
    """Bytes per row of a sweep step: its read buffers of ``dim`` columns, and of ``width``
    columns its messages, those sent and those received (one copy per peer, at most 4);
    ``itemsize`` bytes a value (2: rows read and sent as stored, :func:`_raw`)."""
    peers = min(max(world - 1, 1), 4)
    return itemsize * ((READ_AHEAD + 1) * max(dim, 1) + (2 + peers) * max(width, 1))


def sweep_rows(budget: int, dim: int, width: int, world: int, itemsize: int = 4) -> int:
    """Rows per step of a sweep (before the ranks agree on the smallest): an eighth of
    ``budget`` (:func:`_row_bytes` per row), a range of at most :data:`CHUNK_BYTES` and
    :data:`MAX_STEP_ROWS` rows."""
    per_row = _row_bytes(dim, width, world, itemsize)
    rows = min(CHUNK_BYTES // (itemsize * max(dim, 1)), budget // (8 * per_row), MAX_STEP_ROWS)
    return max(1, rows)


def held_bytes(R: int, dim: int, width: int, world: int, budget: int, itemsize: int = 4) -> int:
    """The sweep's buffers (:func:`sweep_rows`), its marks, and its finishing slices (an
    eighth of ``budget`` at most)."""
    piece = _slice_bytes(budget, dim, width)
    return R * (_row_bytes(dim, width, world, itemsize) + 8) + 8 * piece


def _raw(sl: SumLayer, pre, sources, dim: int, world: int) -> np.dtype | None:
    """The 16-bit dtype the layer's rows are stored in when every rank can read them, send
    them and sum them as stored, else None (collective). That is when the layer's message is
    its input row itself (:attr:`SumLayer.linear` without a scale, all ``dim`` columns, no
    ``pre``) and the rows are stored float16 or bfloat16, not normalised
    (:meth:`LayerRows.stored16`): the message is exact in 16 bits, so the sweep reads and
    sends half the bytes and computes no messages; sums stay float32."""
    code = -1  # a rank without rows agrees with any
    if sources is not None:
        ok = sl.linear and sl.scale is None and pre is None and sl.width == dim
        code = sources.stored16() if ok else 0
    lo = reduced(code if code >= 0 else 3, world, dist.ReduceOp.MIN)
    hi = reduced(code, world, dist.ReduceOp.MAX)
    if lo != hi or lo not in (1, 2):
        return None
    return np.dtype(np.float16) if lo == 1 else np.dtype(np.uint16)


@torch.no_grad()
def served_layer(
    sl: SumLayer,
    inputs: dict[int, np.ndarray],
    parts: list[Partition],
    graphs: dict[int, tuple],
    todo: dict[int, np.ndarray],
    layout: ServedLayout,
    halo_served: dict[int, np.ndarray],
    ctx: DistContext,
    *,
    dim: int,
    outs: dict[int, np.ndarray] | None = None,
    on_output: dict[int, Callable[[np.ndarray, np.ndarray], None]] | None = None,
    pre=None,
    nxt=None,
    budget: int,
    normalize: bool = False,
    threads: int = 8,
    stats: CommStats | None = None,
    input_rows: dict[int, np.ndarray] | None = None,
    spill: Callable | None = None,
) -> None:
    """One layer for the sorted core positions ``todo[part]`` of this rank's ``parts``
    (module docstring); collective. ``inputs[part]``: the layer's input rows of the part's
    core (``dim`` columns), or, with ``input_rows``, of the sorted core positions
    ``input_rows[part]`` only, in order (the compact output of the layer before);
    ``graphs[part] = (indptr, indices, deg)`` over the part's local ids (core, then halo),
    ``deg`` float32 full in-degrees; ``halo_served[part]``: the served index of each halo
    node (:meth:`ServedLayout.served_of`). Outputs go to ``outs[part]``, one row per position
    of ``todo[part]`` in order (``nxt`` applied first: a compact array, not one over every
    core row), or to ``on_output[part](positions in todo, rows)``. ``spill(rows, cols,
    dtype)``: a file-backed scratch array for a pulled layer's own rows when that saves
    rounds (:func:`~shoal.distributed.pulled.pulled_layer`; default None: none)."""
    W = ctx.world_size
    width_in = dim if pre is None else int(pre(torch.zeros(1, dim)).shape[1])
    sources = None
    if parts:  # in served order (parts by their first row among the rank's)
        order = sorted(parts, key=lambda p: int(layout.part_base[p.index]))
        rows = [inputs[p.index] for p in order]
        ids = None
        if input_rows is not None:  # the served rows the compact inputs hold, in order
            ids = np.concatenate(
                [
                    np.asarray(input_rows[p.index], np.int64) + layout.part_base[p.index]
                    for p in order
                ]
            )
        sources = LayerRows(rows, normalize=normalize, threads=threads, row_ids=ids)
    stored = _raw(sl, pre, sources, dim, W)
    size = 4 if stored is None else stored.itemsize
    writers = {p.index: RowWriter(outs[p.index]) for p in parts} if outs is not None else {}
    clock = _Clock()
    width = max(sl.width, width_in)
    slice_rows = max(1, _slice_bytes(budget, dim, width) // (4 * max(dim, width, 1)))

    def finish(p, a: int, block: np.ndarray, acc: np.ndarray, own: np.ndarray) -> None:
        t0 = time.perf_counter()
        emit = None if on_output is None else on_output[p.index]
        writer = writers.get(p.index)
        _finish(sl, p, a, block, acc, own, graphs, slice_rows, stored, nxt, writer, emit)
        clock.add("finish", t0)

    def close() -> None:
        if sources is not None:
            sources.close()
        for w in writers.values():
            w.close()

    if pullable(sl, pre):  # the message is the row: pulled, nothing bucketed
        try:
            pulled_layer(
                sl,
                parts,
                graphs,
                todo,
                layout,
                halo_served,
                ctx,
                sources,
                stored,
                dim=dim,
                budget=budget,
                stats=stats,
                clock=clock,
                finish=finish,
                spill=spill,
            )
        finally:
            close()
        return
    R = reduced(sweep_rows(budget, dim, sl.width, W, size), W, dist.ReduceOp.MIN)
    steps = int(max(-(-int(n) // R) for n in layout.rank_rows)) if len(layout.rank_rows) else 0
    held = held_bytes(R, dim, max(sl.width, width_in), W, budget, size)
    free = max(budget - held, 1)
    # this rank's blocks: (part, block of core positions), the same number of rounds for all
    blocks = []
    for p in parts:
        indices = graphs[p.index][1]
        # while a block's in-edges are bucketed (read from the file, when on disk, beside
        # their offsets and targets; freed before the requests are numbered) its
        # accumulators are not allocated yet: the larger phase counts
        per_target = 4 * sl.width + size * width_in  # its accumulator and own input row
        per_edge = SERVED_EDGE_BYTES
        if file_of(indices) is not None:
            per_edge = max(per_edge, indices.dtype.itemsize + BUCKETED_EDGE_BYTES)
        ids = np.asarray(todo[p.index])
        for a, b in _blocks(graphs[p.index][0], ids, per_target, free, per_edge):
            blocks.append((p, a, ids[a:b]))
    rounds = reduced(len(blocks), W, dist.ReduceOp.MAX)
    log.info(
        "layer of width %d: %d targets in %d block(s) of at most %d, %d round(s) over the "
        "ranks; each round sweeps this rank's %d rows in %d steps of %d rows%s (%.0f MiB of "
        "working memory, %.0f MiB of it buffers)",
        sl.width,
        sum(len(todo[p.index]) for p in parts),
        len(blocks),
        max((len(b[2]) for b in blocks), default=0),
        rounds,
        int(layout.rank_rows[ctx.rank]) if len(layout.rank_rows) else 0,
        steps,
        R,
        "" if stored is None else f", read and sent as stored {_NAMES[stored.char]}",
        budget / 2**20,
        held / 2**20,
    )
    core_deg = _core_degrees(parts, graphs)
    sweep = _Sweep(budget, dim, max(sl.width, width_in), R, stored)
    try:
        for k in range(rounds):
            p, a, block = blocks[k] if k < len(blocks) else (None, 0, np.empty(0, np.int64))
            acc, own = _gather(
                sl,
                p,
                np.asarray(block, np.int64),
                graphs,
                layout,
                halo_served,
                ctx,
                sources,
                core_deg,
                sweep,
                steps,
                pre,
                stats,
                clock,
            )
            if p is not None and len(block):
                finish(p, a, np.asarray(block, np.int64), acc, own)
            # freed before the next round buckets its in-edges (the plan counts a block's
            # accumulators or its bucketing, never both, let alone two blocks')
            del acc, own
        log.info("layer of width %d done: %s", sl.width, clock)
    finally:
        sweep.close()
        close()


def _core_degrees(parts: list[Partition], graphs: dict[int, tuple]) -> torch.Tensor:
    """This rank's rows' degrees, in served order (a view for one part)."""
    if len(parts) == 1:
        return graphs[parts[0].index][2][: parts[0].num_core]
    if not parts:
        return torch.zeros(0)
    return torch.cat([graphs[p.index][2][: p.num_core] for p in parts])


def _requests(p, block, graphs, layout, halo_served, me, R, nb, mark):
    """A block's in-edges bucketed by (step, owner) and numbered within each bucket's
    distinct sources: ``(ptr, off, dst, req_ptr, req)``."""
    ptr = np.zeros(nb + 1, np.int64)
    if p is None or not len(block):
        empty = np.empty(0, OFF)
        return ptr, empty, np.empty(0, np.int32), np.zeros(nb + 1, np.int64), empty
    indptr, indices, _ = graphs[p.index]
    edges, at = (indptr, indices), block
    compact = _in_edges(indptr, indices, block)
    if compact is not None:  # the block's in-edges read from the file into memory
        edges, at = compact, np.arange(len(block), dtype=np.int64)
    hs = halo_served[p.index]
    base = layout.me_base(p, me)
    args = (edges[0], at, edges[1], p.num_core, base, hs, layout.rank_offset, R, ptr)
    m = SK._count_served(*args)
    off, dst = np.empty(m, OFF), np.empty(m, np.int32)
    SK._bucket_served(*args, off, dst)
    del compact, edges
    req_ptr = np.zeros(nb + 1, np.int64)
    req = np.empty(m, OFF)
    n = SK._number_buckets(ptr, off, mark, req_ptr, req)
    return ptr, off, dst, req_ptr, req[:n]


def _by_owner(req: np.ndarray, req_ptr: np.ndarray, steps: int, W: int, me: int) -> np.ndarray:
    """The requests of other owners than ``me``, reordered from (step, owner) buckets to
    (owner, step): one copy, no index array per request (a block's requests are about one
    per in-edge)."""
    pieces = [
        req[req_ptr[s * W + o] : req_ptr[s * W + o + 1]]
        for o in range(W)
        if o != me
        for s in range(steps)
    ]
    return np.concatenate(pieces) if pieces else req[:0].copy()


def _gather(
    sl,
    p,
    block,
    graphs,
    layout,
    halo_served,
    ctx,
    sources,
    core_deg,
    sweep,
    steps,
    pre,
    stats,
    clock,
):
    """One round's sweep (module docstring): returns the block's accumulators and its
    targets' own input rows (``pre`` applied), read in the same sweep (a target is a row of
    this rank: the step holding it reads it with the rows asked for)."""
    W, me, R = ctx.world_size, ctx.rank, sweep.R
    nb = steps * W
    t0 = time.perf_counter()
    ptr, off, dst, req_ptr, req = _requests(
        p, block, graphs, layout, halo_served, me, R, nb, sweep.mark
    )
    t0 = clock.add("requests", t0)
    counts = np.diff(req_ptr).reshape(steps, W)  # my requests per (step, owner)
    asked = np.zeros((W, steps), np.int64)  # each requester's per step of my rows
    peer = [np.empty(0, OFF)] * W
    if W > 1:
        send_c = torch.from_numpy(np.ascontiguousarray(counts.T))
        recv_c = torch.empty_like(send_c)
        dist.all_to_all_single(recv_c, send_c)
        asked = recv_c.numpy().copy()
        asked[me] = 0
        per_owner = counts.sum(0)
        send_n = np.where(np.arange(W) == me, 0, per_owner)
        got = np.empty(int(asked.sum()), OFF)
        size = OFF().itemsize  # sent as bytes: gloo has no 16-bit unsigned type
        out_ids = _by_owner(req, req_ptr, steps, W, me).view(np.uint8)
        all_to_all_rows(out_ids, got.view(np.uint8), send_n * size, asked.sum(1) * size)
        if stats is not None:
            stats.tally(int(send_n.sum()), int(asked.sum()), size)
        cut = np.concatenate([[0], np.cumsum(asked.sum(1))])
        peer = [got[cut[r] : cut[r + 1]] for r in range(W)]
    t0 = clock.add("ask", t0)
    peer_ptr = [np.concatenate([[0], np.cumsum(asked[r])]) for r in range(W)]
    acc = np.zeros((len(block), sl.width), np.float32)
    own = None  # the targets' own rows, kept as their steps pass
    # the block's targets by step: served rows base + block, block[tcut[s]:tcut[s + 1]]
    base = int(layout.part_base[p.index]) if p is not None else 0
    mine = np.asarray(block, np.int64) + base
    tcut = np.searchsorted(mine, np.arange(steps + 1, dtype=np.int64) * R)

    def items():
        for s in range(steps):
            b = s * W + me
            lists = [
                req[req_ptr[b] : req_ptr[b + 1]]
                if r == me
                else peer[r][peer_ptr[r][s] : peer_ptr[r][s + 1]]
                for r in range(W)
            ]
            tg = (mine[tcut[s] : tcut[s + 1]] - s * R).astype(OFF)
            union = None
            if any(len(x) for x in lists) or len(tg):
                union = unique_sorted(np.concatenate([*lists, tg]))
            ids = np.empty(0, np.int64) if union is None else union.astype(np.int64) + s * R
            yield ids, s, union, lists, tg

    raw = sweep.stored is not None  # rows read, sent and summed as stored (_raw)
    half = sweep.stored == np.float16
    mtype = np.uint16 if raw else np.float32
    for (ids, s, union, lists, tg), h in _read_ahead(
        sweep.pool, _Rows(sources, sweep.stored), pre, items(), sweep.range_bufs
    ):
        t0 = clock.add("read wait", t0)
        hn = h.numpy().view(np.uint16) if raw else None
        if len(tg):  # the targets' own rows of this step
            if own is None:
                own = np.empty((len(block), h.shape[1]), mtype)
            at_tg = np.searchsorted(union, tg)
            own[tcut[s] : tcut[s + 1]] = hn[at_tg] if raw else h[torch.from_numpy(at_tg)].numpy()
        msg = None
        if raw:  # the message is the row as stored
            msg = hn
        elif len(ids):
            d = core_deg[torch.from_numpy(ids)].unsqueeze(1)
            msg = np.ascontiguousarray(sl.message(h, d).numpy())
        if W > 1:
            send_n = [0 if r == me else len(lists[r]) for r in range(W)]
            send = sweep.buffer("send", sum(send_n), sl.width, mtype)
            at = 0
            for r in range(W):  # the rows each peer asked for, in its order
                if send_n[r]:
                    np.take(
                        msg, np.searchsorted(union, lists[r]), axis=0, out=send[at : at + send_n[r]]
                    )
                    at += send_n[r]
            recv_n = [0 if o == me else int(counts[s, o]) for o in range(W)]
            got = sweep.buffer("recv", sum(recv_n), sl.width, mtype)
            t0 = clock.add("messages", t0)
            if raw:  # as bytes: gloo has no 16-bit unsigned type
                all_to_all_rows(send.view(np.uint8), got.view(np.uint8), send_n, recv_n)
            else:
                all_to_all_rows(send, got, send_n, recv_n)
            t0 = clock.add("exchange", t0)
            if stats is not None:
                stats.tally(int(sum(send_n)), int(sum(recv_n)), send.itemsize * sl.width)
            at = 0
            for o in range(W):
                n = recv_n[o]
                if n:
                    b = s * W + o
                    e = slice(ptr[b], ptr[b + 1])
                    _add(acc, got[at : at + n], dst[e], off[e], raw, half)
                    at += n
        b = s * W + me
        if len(lists[me]):  # its own rows: each edge's message found in the union directly
            e = slice(ptr[b], ptr[b + 1])
            pos = np.searchsorted(union, lists[me])[off[e]]
            _add(acc, msg, dst[e], pos, raw, half)
        t0 = clock.add("add", t0)
    return acc, own


def _add(acc, msg, dst, pos, raw: bool, half: bool) -> None:
    """``acc[dst[e]] += msg[pos[e]]``; 16-bit ``msg`` widened as added when ``raw``."""
    if raw:
        BK._scatter_add16(acc, msg, dst, pos, half)
    else:
        BK._scatter_add(acc, msg, dst, pos)


class _Clock:
    """Seconds a layer spent in each phase (logged when it is done)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, phase: str, since: float) -> float:
        """Count the time from ``since`` to now in ``phase``; returns now."""
        now = time.perf_counter()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - since
        return now

    def __str__(self) -> str:
        return ", ".join(f"{k} {v:.1f} s" for k, v in self.seconds.items())


class _Rows:
    """A :class:`LayerRows` that may be absent (a rank without parts is never asked); with
    ``stored``, rows are read as stored and handed over as int16 bits (torch has no uint16
    arithmetic; the kernels view them as uint16)."""

    def __init__(self, rows, stored=None) -> None:
        self.rows = rows
        self.stored = stored

    def read(self, ids, out):
        if self.rows is None or not len(ids):
            return out[:0].view(np.int16) if self.stored is not None else out[:0]
        if self.stored is not None:
            return self.rows.read_stored(ids, out).view(np.int16)
        return self.rows.read(ids, out)


def _widen(rows: np.ndarray, stored: np.dtype) -> np.ndarray:
    """float32 values of 16-bit ``rows`` (uint16 bits of ``stored``: float16 or bfloat16)."""
    if stored == np.float16:
        return rows.view(np.float16).astype(np.float32)
    return (rows.astype(np.uint32) << 16).view(np.float32)


def _finish(sl, p, a, block, acc, own, graphs, slice_rows, stored, nxt, writer, emit):
    """Finish a block's targets ``slice_rows`` at a time (their own rows kept from the sweep,
    16-bit bits of ``stored`` when not None; spilled to a scratch file: read back slice by
    slice with planned reads, not page faults)."""
    deg_t = graphs[p.index][2]
    k = slice_rows
    spilled = open_rows(own, threads=1) if file_of(own) is not None else None
    buf = np.empty((min(k, len(block)), own.shape[1]), own.dtype) if spilled else None
    try:
        for i in range(0, len(block), k):
            ids = block[i : i + k]
            d = deg_t[torch.from_numpy(ids)].unsqueeze(1)
            if spilled is None:
                mine = own[i : i + k]
            else:
                mine = buf[: len(ids)]
                spilled.read(np.arange(i, i + len(ids), dtype=np.int64), mine)
            if stored is not None:
                mine = _widen(mine, stored)
            h = sl.finish(torch.from_numpy(acc[i : i + k]), torch.from_numpy(mine), d)
            if writer is not None:  # rows a + i.. of the compact output
                writer.write(np.arange(a + i, a + i + len(h)), (nxt(h) if nxt else h).numpy())
            else:
                emit(np.arange(a + i, a + i + len(h)), h.numpy())
    finally:
        if spilled is not None:
            spilled.close()
