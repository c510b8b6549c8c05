"""Served layers whose message is the input row: sums over the sources' own rows.

The sweep (:mod:`shoal.distributed.served`) buckets every in-edge of a block by (step,
owner), numbers each bucket's sources, and scatter-adds each edge's message when its step
comes: ~10 bytes and two passes per in-edge before a row is added. When a layer's message is
its input row itself (:attr:`SumLayer.linear` without a ``scale``, no ``pre``, as GraphSAGE's
and GIN's sums), no message needs computing, so no edge needs bucketing: a block's in-edges
are renumbered once to their sources' served indices and kept sorted per owner, one cursor
per target and owner, and every rank sweeps its own rows in steps, reading in each step
only the rows some list needs, while every target's cursor moves over the step's rows
(:func:`~shoal.training._kernels.pull_chunk_kernel`, the single-process chunked pull).

Two ways to bring a target and its sources' rows together (:data:`PARTIAL_SUMS`):

- **owners sum** (default): a round's lists go, owner by owner, to the ranks that own their
  sources (4 bytes an in-edge, once); each rank pulls every rank's lists over its own rows
  alone, into an accumulator per target of every block, and sends each peer its targets'
  partial sums at the end of the round (a float32 row per target and owner), where they are
  added; NeutronStar's mirrors sum for their master the same way (Wang et al., SIGMOD 2022,
  Sec. 4.2, Fig. 7: gradients there, a forward sum here). Between a round's two exchanges the
  ranks do not wait for each other; a step needs no buffers for the peers' rows, so steps
  are larger and each target's accumulator, loaded and stored once per step with an entry
  in it, is visited in fewer steps;
- **rows sent** (the ablation): every step, each rank sends the rows of its step's range
  that the peers' blocks need (asked once per round: the pull of DistDGL's KVStore, Zheng
  et al., IA3 2020, Sec. III-C, under its owner-compute rule, Sec. III-A), the ranks
  stepping together; a step's rows leave before the rank pulls its own (an asynchronous
  all-to-all) and the peers' rows are pulled after.

Same outputs as the sweep within float tolerance (sums run in another order).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import NamedTuple

import numpy as np
import torch
import torch.distributed as dist

from shoal.distributed.comm import CommStats, reduced
from shoal.distributed.pulled_rows import rows_round
from shoal.distributed.pulled_sums import SUM_CHUNK, sums_round
from shoal.distributed.runtime import DistContext
from shoal.nn.base import SumLayer
from shoal.training.blocked import id_dtype
from shoal.utils.memory import huge_empty

__all__ = ["MIN_STEPS", "PULL_ROUNDS", "SPILL_OWN_ROWS", "pullable", "pulled_layer", "step_rows"]

log = logging.getLogger(__name__)

#: whether layers whose message is the row are pulled (default True; False sweeps them as
#: every other layer: the ablation, and how tests exercise the sweep on such layers)
PULL_ROUNDS = True
#: whether each rank sums its own rows for every rank's targets (default True: a round sends
#: every owner the in-edges of the block whose sources it owns, each rank pulls those over its
#: own rows alone, and each target's partial sum comes back once a round, as NeutronStar's
#: mirrors send their partial aggregates to the master, Wang et al., SIGMOD 2022, Sec. 4.2,
#: Fig. 7; False: the rows a block needs are sent to it every step and pulled there, DistDGL's
#: pull: the ablation). Partial sums move a row per target and owner, not per source row
#: asked, and a rank's steps need no buffers for its peers' rows: steps are larger, each
#: target's accumulator visited in fewer of them
PARTIAL_SUMS = True
#: steps read ahead of the one being pulled (one buffer read while the other is pulled)
READ_AHEAD = 1
#: a step's read buffer at most (default 1 GiB; :data:`STEP_SHARE` bounds all of a step's
#: buffers): fewer steps, fewer visits of every target's cursors (larger steps
#: pulled faster: docs/measurements.md#pulled-layers-no-edge-bucketed-session-of-2026-12-01)
STEP_BYTES = 1 << 30
#: a step's buffers take at most 1 / STEP_SHARE of the working memory (default 8, the
#: sweep's; 4 measured alike in 4 GiB at the quarter: docs/measurements.md)
STEP_SHARE = 8
#: with :data:`PARTIAL_SUMS`, a step's read buffers take at most 1 / SUM_STEP_SHARE of the
#: working memory (default 4: half the steps of 8, each accumulator visited in fewer; 2
#: doubles the rounds, each a sweep of the rank's rows: docs/measurements.md)
SUM_STEP_SHARE = 4
#: with :data:`PARTIAL_SUMS`, the smallest share a step's read buffers may shrink to when
#: that takes fewer rounds (default 8: from 1 / :data:`SUM_STEP_SHARE` down to 1 / 8 of the
#: working memory, the first share with the fewest rounds; a round is a sweep of the rank's
#: rows from disk, a smaller step a visit more of each accumulator:
#: docs/measurements.md#a-round-fewer-session-of-2026-12-04). Equal to SUM_STEP_SHARE: the
#: share is fixed (the ablation)
SUM_STEP_SHARE_MAX = 8
#: a rank's rows are swept in at least this many steps when it has that many rows (default
#: 6): the first step's read waits alone, each later one is read while the step before it is
#: pulled, so a sweep in two 1 GiB steps waits for half the rows (10M nodes uncapped, owners
#: summing: docs/measurements.md#steps-of-a-sixth-at-least-session-of-2026-12-03)
MIN_STEPS = 6
#: whether the owners' sum spills its targets' own rows to a scratch file (written in block
#: order as the steps pass them, read back to finish) when that takes fewer rounds, each a
#: sweep of the rank's rows (default True; False keeps them in memory: the ablation)
SPILL_OWN_ROWS = True
#: bytes per needed source while a round is planned: its local id, its served index and
#: its offset among its owner's rows (at most; 4 bytes each under 2**31 nodes)
SOURCE_BYTES = 12


def pullable(sl: SumLayer, pre) -> bool:
    """Whether the layer is pulled (the same answer on every rank)."""
    return PULL_ROUNDS and sl.linear and sl.scale is None and pre is None


def _row_bytes(dim: int, size: int, world: int, sums: bool = False) -> int:
    """Bytes per row of a step: the read buffers, float32 rows' read before they are laid
    out (:class:`_DenseRows`) and, unless the owners sum (``sums``), those sent and received
    (one range of each peer at most), a peer's laid out by offset and the step's marks."""
    if sums:  # (a packed step's slots lie in its read buffer's free tail: tail_slots)
        return size * dim * (READ_AHEAD + 1 + (size == 4))
    peers = max(world - 1, 1)
    return size * dim * (READ_AHEAD + 2 + 2 * peers + (size == 4)) + 1


def step_rows(
    budget: int, dim: int, size: int, world: int, sums: bool = False, share: int | None = None
) -> int:
    """Rows per step (before the ranks agree on the smallest, unless the owners sum):
    buffers of ``1 / share`` of ``budget`` (default :data:`STEP_SHARE`, or
    :data:`SUM_STEP_SHARE` when the owners sum, ``sums``), a read buffer of at most
    :data:`STEP_BYTES`."""
    if share is None:
        share = SUM_STEP_SHARE if sums else STEP_SHARE
    rows = budget // (share * _row_bytes(dim, size, world, sums))
    return max(1, min(rows, STEP_BYTES // max(size * dim, 1)))


def _two_phase_blocks(indptr, targets, phases, budget: int, most: int | None = None) -> list:
    """Consecutive blocks of ``targets`` each of whose ``phases`` ``(per target, per
    in-edge)`` bytes stay within ``budget`` (at least one target a block, at most ``most``)."""
    d = np.asarray(indptr[targets + 1], np.int64) - np.asarray(indptr[targets], np.int64)
    costs = [np.cumsum(d * e + t) for t, e in phases]
    bounds = [0]
    while bounds[-1] < len(targets):
        a = bounds[-1]
        b = min(
            int(np.searchsorted(c, (c[a - 1] if a else 0) + budget, side="right")) for c in costs
        )
        if most is not None:
            b = min(b, a + most)
        bounds.append(max(b, a + 1))
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _blocks(parts, todo, graphs, phases, free: int, most: int | None = None) -> list:
    """``(part, first position, targets)`` of every block of this rank's targets
    (:func:`_two_phase_blocks`), part by part."""
    blocks = []
    for p in parts:
        ids = np.asarray(todo[p.index])
        for a, b in _two_phase_blocks(graphs[p.index][0], ids, phases, free, most):
            blocks.append((p, a, ids[a:b]))
    return blocks


def _spilled_blocks(parts, todo, graphs, planned, pulling, free: int, own: int, W: int):
    """``(blocks, rounds)`` of the owners' sum with the targets' own rows (``own`` bytes
    each) spilled to a scratch file instead of kept (collective: every rank's cap on a
    block's targets and the rounds are agreed)."""
    per_target = max(pulling[0] - own, 1)
    most = reduced(max(free // per_target, 1), W, dist.ReduceOp.MIN)
    blocks = _blocks(parts, todo, graphs, (planned, (per_target, pulling[1])), free, most)
    return blocks, reduced(len(blocks), W, dist.ReduceOp.MAX)


class _Plan(NamedTuple):
    """A pulled layer's plan on this rank: ``R`` rows a step in ``steps`` steps, ``held``
    bytes of step buffers, its ``blocks`` of targets, the ``rounds`` agreed over the ranks
    and whether the targets' own rows are ``spilled``."""

    R: int
    steps: int
    held: int
    blocks: list
    rounds: int
    spilled: bool


def _shares(sums: bool) -> range:
    """The step buffers' shares of the working memory a plan tries, first to last: the
    owners' sum from :data:`SUM_STEP_SHARE` to :data:`SUM_STEP_SHARE_MAX`, else
    :data:`STEP_SHARE` alone."""
    if not sums:
        return range(STEP_SHARE, STEP_SHARE + 1)
    return range(SUM_STEP_SHARE, max(SUM_STEP_SHARE_MAX, SUM_STEP_SHARE) + 1)


def _plan(
    sl: SumLayer,
    parts: list,
    graphs: dict,
    todo: dict,
    layout,
    halo_served: dict,
    ctx: DistContext,
    dim: int,
    size: int,
    budget: int,
    share: int,
    sums: bool,
    spill,
) -> _Plan:
    """The plan of a pulled layer with step buffers of ``1 / share`` of ``budget``
    (collective: the steps, unless the owners sum, a block's targets and the rounds are
    agreed over the ranks)."""
    W, me = ctx.world_size, ctx.rank
    R = step_rows(budget, dim, size, W, sums, share)
    if not sums:  # the ranks step together
        R = reduced(R, W, dist.ReduceOp.MIN)
    mine = int(layout.rank_rows[me]) if len(layout.rank_rows) else 0
    most_rows = mine if sums else int(layout.rank_rows.max(initial=1))
    R = max(1, min(R, -(-most_rows // MIN_STEPS)))
    if sums:  # each rank its own steps
        steps = -(-mine // R)
    else:
        steps = int(max(-(-int(n) // R) for n in layout.rank_rows)) if len(layout.rank_rows) else 0
    held = R * _row_bytes(dim, size, W, sums)
    off = np.dtype(id_dtype(int(layout.rank_rows.max(initial=1)))).itemsize
    edge = np.dtype(id_dtype(int(layout.rank_offset[-1]))).itemsize
    if sums:
        # beside the blocks: the marks of the rows a round reads (a byte per row of this
        # rank) and the chunks of partial sums sent and received
        fixed = mine + 2 * SUM_CHUNK * max(W - 1, 1) * 4 * sl.width
        # while a block's lists are made (its in-edges as read and renumbered, per target
        # its list start, runs and counts, then the lists by owner: flat ids, a received
        # peer's as many, this rank's own copied out) and while it is pulled (per target
        # and rank, the block's and the peers' as large, a list start, a cursor and an
        # accumulator; its own row; per in-edge an id: the block's entries over this
        # rank's rows and the peers' over them, as many as the block's in-edges when the
        # peers' blocks are as large, the entries sent freed)
        planned = (8 + 24 * W, edge + 2 * off)
        pulling = (W * (16 + 4 * sl.width) + size * dim, off)
    else:
        # beside the blocks: a round's marks (a byte per local id of a part) and the ids the
        # peers ask of this rank (every row of it at most)
        local = max((p.num_core + len(halo_served[p.index]) for p in parts), default=0)
        fixed = local + off * mine
        # while a block is planned (its in-edges, their distinct sources in three arrays at
        # most at once) and while it is pulled (its in-edges and sources' ids, per target its
        # list start, cursors, accumulator and own row): each phase within the working memory
        planned = (8, edge + SOURCE_BYTES)
        pulling = (8 + 16 * W + 4 * sl.width + size * dim, edge + off)
    free = max(budget - held - fixed, 1)
    most = None
    if sums:  # a peer's block costs this rank its accumulators: no block has more targets
        # than every rank's working memory holds accumulators for
        most = reduced(max(free // pulling[0], 1), W, dist.ReduceOp.MIN)
    blocks = _blocks(parts, todo, graphs, (planned, pulling), free, most)
    rounds = reduced(len(blocks), W, dist.ReduceOp.MAX)
    spilled = False
    if sums and SPILL_OWN_ROWS and spill is not None and rounds > 1:  # fewer rounds?
        fewer = _spilled_blocks(parts, todo, graphs, planned, pulling, free, size * dim, W)
        if fewer[1] < rounds:
            (blocks, rounds), spilled = fewer, True
    return _Plan(R, steps, held, blocks, rounds, spilled)


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
    spill: Callable | None = None,
) -> None:
    """One layer of :func:`~shoal.distributed.served.served_layer` for a layer that
    :func:`pullable` admits (module docstring); collective. ``sources``: this rank's rows
    (None without parts); ``stored``: the 16-bit dtype they are read, sent and summed as
    (None: float32); ``finish(p, a, block, acc, own)`` finishes a block's targets.
    ``spill(rows, cols, dtype)``: a file-backed scratch array (default None: none); when the
    owners sum and writing the targets' own rows there (in block order, read back to
    finish) takes fewer rounds than keeping them in memory, every rank spills them
    (:func:`_spilled_blocks`: the single-process chunked pull's spill,
    :mod:`shoal.training.blocked`)."""
    W, me = ctx.world_size, ctx.rank
    size = 4 if stored is None else np.dtype(stored).itemsize
    sums = PARTIAL_SUMS and W > 1
    plan = None
    for share in _shares(sums):  # collective: every rank tries the same shares
        got = _plan(
            sl, parts, graphs, todo, layout, halo_served, ctx, dim, size, budget, share, sums, spill
        )
        if plan is None or got.rounds < plan.rounds:
            plan = got
        if plan.rounds <= 1:
            break
    R, steps, held, blocks, rounds, spilled = plan
    mine = int(layout.rank_rows[me]) if len(layout.rank_rows) else 0
    log.info(
        "layer of width %d: %d targets in %d block(s) of at most %d, %d round(s) over the "
        "ranks, each target %s%s as each round sweeps this rank's %d rows in %d steps of %d "
        "rows%s (%.0f MiB of working memory, %.0f MiB of it buffers)",
        sl.width,
        sum(len(todo[p.index]) for p in parts),
        len(blocks),
        max((len(b[2]) for b in blocks), default=0),
        rounds,
        "summed by its sources' owners" if sums else "pulling its sources' rows",
        "" if stored is None else f" as stored {np.dtype(stored).name}",
        mine,
        steps,
        R,
        ", own rows spilled to a scratch file" if spilled else "",
        budget / 2**20,
        held / 2**20,
    )
    read = np.float32 if stored is None else stored
    bufs = [huge_empty((R, dim), read) for _ in range(READ_AHEAD + 1)]
    spare: dict = {}
    pool = ThreadPoolExecutor(1, thread_name_prefix="shoal-pulled-read")
    one_round = partial(sums_round, spill=spill if spilled else None) if sums else rows_round
    try:
        for k in range(rounds):
            p, a, block = blocks[k] if k < len(blocks) else (None, 0, np.empty(0, np.int64))
            block = np.asarray(block, np.int64)
            acc, own = one_round(
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
