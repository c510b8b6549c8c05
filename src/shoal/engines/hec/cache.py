"""The historical embedding cache and its delayed asynchronous push (DistGNN-MB).

Vasimuddin et al., "DistGNN-MB: Distributed Large-Scale Graph Neural Network Training on x86
via Minibatch Sampling" (2022), Section 3.2 and Algorithms 1-2:

- :class:`HistoricalCache` is one layer's HEC (Sec. 3.2; ``HECStore``, ``HECSearch``,
  ``HECLoad``): ``cs`` lines of a tag, a row and an age in mini-batch steps (the paper does
  not fix the unit; a row pushed at step ``k`` with ``d = 1`` and ``ls = 2`` is used at steps
  ``k + 1 .. k + 3``), at most ``min(cs, halo nodes)`` lines
  (docs/distributed.md#hec-distgnn-mb).
- :func:`halo_database` is Algorithm 1's ``db_halo``: for every other rank ``r``, the local
  solid nodes that are halo nodes on ``r``. The paper broadcasts every rank's halo ids; here
  each rank sends each owner only the halo ids it owns (one all-to-all-v), the same database
  for less traffic.
- :func:`select_push` is Algorithm 2, lines 15-21: at most ``nc`` of the batch's solid nodes
  in ``db_halo[r]``, drawn by degree (the paper does not say which: the full in-degree plus
  one, so nodes without in-edges can be drawn too).
- :class:`DelayedPush` is lines 7-9 and 22-24 (line 24's ``AlltoallAsync``): the message sent
  at step ``k`` is waited for and stored at step ``k + d``, so ``d`` steps of compute overlap it.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from shoal.distributed.comm import CommStats, exchange
from shoal.graph.blocks import Block
from shoal.utils.arrays import unique_sorted

__all__ = [
    "DelayedPush",
    "drop_sources",
    "HecLayerStats",
    "HistoricalCache",
    "halo_database",
    "select_push",
]

_EMPTY = np.iinfo(np.int64).min // 4  # the stamp of a line never filled: older than any


@dataclass
class HecLayerStats:
    """One layer's counters (reset per epoch): halo lookups and hits, rows pushed, received
    and stored, halo nodes dropped from batches as misses."""

    lookups: int = 0
    hits: int = 0
    pushed: int = 0
    received: int = 0
    dropped: int = 0

    def reset(self) -> None:
        self.lookups = self.hits = self.pushed = self.received = self.dropped = 0


@dataclass
class HistoricalCache:
    """One layer's historical embedding cache (module docstring).

    Args:
        universe: the tags this cache may ever hold (this rank's halo nodes' global ids);
        dim: row width; size: ``cs``, the most lines (default 1M, the paper's);
        lifespan: ``ls``, in mini-batch steps (default 2).
    """

    universe: np.ndarray
    dim: int
    size: int = 1_000_000
    lifespan: int = 2
    stats: HecLayerStats = field(default_factory=HecLayerStats)

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"size (cs) must be >= 1, got {self.size}")
        if self.lifespan < 0:
            raise ValueError(f"lifespan (ls) must be >= 0, got {self.lifespan}")
        u = unique_sorted(np.asarray(self.universe, dtype=np.int64))
        self.universe = u
        cap = int(min(self.size, len(u)))
        self.capacity = cap
        self.tags = np.full(cap, -1, dtype=np.int64)
        self.stamp = np.full(cap, _EMPTY, dtype=np.int64)
        self.rows = np.zeros((cap, int(self.dim)), dtype=np.float32)
        self.line_of = np.full(len(u), -1, dtype=np.int64)  # universe position -> line

    def _positions(self, tags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of ``tags`` in the universe and whether each is in it."""
        pos = np.searchsorted(self.universe, tags)
        pos = np.minimum(pos, max(len(self.universe) - 1, 0))
        inside = (self.universe[pos] == tags) if len(self.universe) else np.zeros(len(tags), bool)
        return pos, inside

    def store(self, tags: np.ndarray, rows: np.ndarray | torch.Tensor, now: int) -> int:
        """HECStore: lines for ``tags`` (unique) get ``rows`` and age 0 at step ``now``; a
        tag already held is overwritten in place, others take the oldest lines (expired or
        empty ones first, being the oldest). When more tags arrive than lines can be freed
        (lines written at this step are kept), the surplus is not stored. Returns the rows
        stored."""
        tags = np.asarray(tags, dtype=np.int64)
        rows = rows.numpy() if isinstance(rows, torch.Tensor) else np.asarray(rows)
        if len(tags) != len(rows):
            raise ValueError(f"{len(tags)} tags but {len(rows)} rows")
        if len(tags) == 0 or self.capacity == 0:
            return 0
        pos, inside = self._positions(tags)
        if not inside.all():
            bad = int(tags[~inside][0])
            raise ValueError(f"node {bad} is not a halo node of this rank: it cannot be cached")
        line = self.line_of[pos]
        have = line >= 0
        self.rows[line[have]] = rows[have]
        self.stamp[line[have]] = now
        new = np.flatnonzero(~have)
        if len(new):
            free = np.flatnonzero(self.stamp < now)  # not written at this step
            if len(new) > len(free):
                new = new[: len(free)]
            if len(new) < len(free):
                victims = free[np.argpartition(self.stamp[free], len(new) - 1)[: len(new)]]
            else:
                victims = free
            old = self.tags[victims]
            held = old >= 0
            if held.any():
                self.line_of[self._positions(old[held])[0]] = -1
            self.tags[victims] = tags[new]
            self.rows[victims] = rows[new]
            self.stamp[victims] = now
            self.line_of[pos[new]] = victims
        return int(have.sum() + len(new))

    def lookup(self, tags: np.ndarray, now: int) -> tuple[np.ndarray, np.ndarray]:
        """HECSearch at step ``now``: ``(hit, lines)``, whether each tag has a valid line
        (held, age ``now - stored`` at most the life-span) and the lines of the hits."""
        tags = np.asarray(tags, dtype=np.int64)
        if len(tags) == 0 or self.capacity == 0:
            return np.zeros(len(tags), dtype=bool), np.empty(0, dtype=np.int64)
        pos, inside = self._positions(tags)
        line = np.where(inside, self.line_of[pos], -1)
        hit = line >= 0
        hit[hit] = (now - self.stamp[line[hit]]) <= self.lifespan
        return hit, line[hit]

    def load(self, lines: np.ndarray) -> torch.Tensor:
        """HECLoad: the rows of ``lines`` (a copy)."""
        return torch.from_numpy(self.rows[lines])

    def state(self, now: int) -> dict[str, torch.Tensor]:
        """What a checkpoint keeps so that a resumed run hits and evicts as the uninterrupted
        one would: every held line's position, tag and stamp, and the rows of the lines still
        valid at step ``now`` (an expired line's row is never read again: a lookup refuses it
        and a store overwrites it), so the file grows with the lines a life-span keeps, not
        with the cache's size."""
        held = np.flatnonzero(self.tags >= 0)
        valid = held[(now - self.stamp[held]) <= self.lifespan]
        return {
            "lines": torch.from_numpy(held),
            "tags": torch.from_numpy(self.tags[held]),
            "stamp": torch.from_numpy(self.stamp[held]),
            "valid": torch.from_numpy(valid),
            "rows": torch.from_numpy(self.rows[valid]),
        }

    def restore(self, state: dict[str, torch.Tensor]) -> None:
        """:meth:`state`'s output, saved by this rank with the same halo (the same store and
        number of processes)."""
        lines, tags = state["lines"].numpy(), state["tags"].numpy()
        if len(lines) and (lines.max() >= self.capacity or not self._positions(tags)[1].all()):
            raise ValueError("the saved cache does not fit this rank's halo")
        self.tags[:] = -1
        self.stamp[:] = _EMPTY
        self.rows[:] = 0
        self.line_of[:] = -1
        self.tags[lines] = tags
        self.stamp[lines] = state["stamp"].numpy()
        self.rows[state["valid"].numpy()] = state["rows"].numpy()
        self.line_of[self._positions(tags)[0]] = lines

    def valid_lines(self, now: int) -> int:
        """Lines holding a tag whose age at step ``now`` is within the life-span."""
        return int(np.count_nonzero((self.tags >= 0) & (now - self.stamp <= self.lifespan)))


def halo_database(
    halo_ids: np.ndarray, owner_rank: np.ndarray, world_size: int, stats: CommStats | None = None
) -> list[np.ndarray]:
    """Algorithm 1 (``db_halo``): ``db[r]`` = sorted global ids of this rank's solid nodes that
    are halo nodes on rank ``r`` (empty for this rank). ``halo_ids``: this rank's halo nodes;
    ``owner_rank``: the rank owning each. A collective."""
    halo_ids = np.asarray(halo_ids, dtype=np.int64)
    owner_rank = np.asarray(owner_rank, dtype=np.int64)
    rank = dist.get_rank() if dist.is_initialized() else 0
    if world_size == 1:
        return [np.empty(0, dtype=np.int64)]
    order = np.argsort(owner_rank, kind="stable")
    counts = np.bincount(owner_rank, minlength=world_size).astype(np.int64)
    if counts[rank]:
        raise ValueError("a halo node of this rank is owned by this rank")
    recv, rc = exchange(halo_ids[order], counts, stats)
    recv = recv.numpy()
    off = np.concatenate([[0], np.cumsum(rc)])
    return [np.sort(recv[off[r] : off[r + 1]]) for r in range(world_size)]


def select_push(
    solid: np.ndarray,
    db: np.ndarray,
    degrees: np.ndarray,
    limit: int | None,
    rng: np.random.Generator,
) -> np.ndarray:
    """Algorithm 2, lines 15-21: of ``solid`` (a batch's solid nodes, global ids, unique), those
    in ``db`` (sorted: the solid nodes that are halo on one peer); when more than ``limit``
    (``nc``; None = all), ``limit`` of them drawn without replacement, each with probability
    proportional to its ``degrees`` + 1 (aligned with ``solid``), by Efraimidis-Spirakis
    keys. Returns the chosen ids in ``solid``'s order."""
    solid = np.asarray(solid, dtype=np.int64)
    if len(db) == 0 or len(solid) == 0:
        return np.empty(0, dtype=np.int64)
    pos = np.minimum(np.searchsorted(db, solid), len(db) - 1)
    sel = np.flatnonzero(db[pos] == solid)
    if limit is not None and len(sel) > limit:
        if limit <= 0:
            return np.empty(0, dtype=np.int64)
        w = np.asarray(degrees, dtype=np.float64)[sel] + 1.0
        keys = np.log(rng.random(len(sel))) / w  # the largest keys: a weighted sample
        sel = np.sort(sel[np.argpartition(-keys, limit - 1)[:limit]])
    return solid[sel]


def drop_sources(block: Block, sources: np.ndarray) -> Block:
    """``block`` without the edges leaving ``sources`` (source positions): a halo node that
    missed the cache takes no part in that layer's aggregation (Algorithm 2, line 11). Node
    counts and full-graph degrees are kept; each target's sampled count shrinks. A typed
    block keeps its sources' types and original ids, and its kept edges their relations."""
    drop = np.zeros(block.num_src, dtype=bool)
    drop[np.asarray(sources, dtype=np.int64)] = True
    keep = ~torch.from_numpy(drop)[block.edge_index[0]]
    ei = block.edge_index[:, keep]  # still grouped by target
    counts = torch.bincount(ei[1], minlength=block.num_dst)
    rowptr = torch.zeros(block.num_dst + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(counts, 0)
    return Block(
        ei,
        block.num_src,
        block.num_dst,
        rowptr,
        block.deg_src,
        node_ids=block.node_ids,
        edge_type=None if block.edge_type is None else block.edge_type[keep],
        src_type=block.src_type,
    )


@dataclass
class _Flight:
    step: int
    future: Future  # -> (float32 words from each peer, the words received)


class DelayedPush:
    """Pushes of every layer, sent at step ``k`` and stored at step ``k + d`` (module
    docstring). ``dims``: row width per layer. A collective object: every rank constructs it
    and calls :meth:`send` and :meth:`receive` at the same steps, in the same order.

    The exchange (the sizes, then the payload: two all-to-all-v) runs on a thread and a gloo
    process group of its own (made here), so neither blocks the step; only :meth:`receive`,
    ``d`` steps later, waits for what has not arrived yet (docs/distributed.md#hec-distgnn-mb).
    """

    def __init__(
        self, dims: list[int], world_size: int, delay: int = 1, stats: CommStats | None = None
    ) -> None:
        if delay < 1:
            raise ValueError(f"delay (d) must be >= 1, got {delay}")
        self.dims = [int(d) for d in dims]
        self.world = int(world_size)
        self.delay = int(delay)
        self.stats = stats
        self.flights: deque[_Flight] = deque()
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.group = None
        self.pool: ThreadPoolExecutor | None = None
        if self.world > 1:
            # collectives of this group never interleave with the training group's
            self.group = dist.new_group(backend="gloo")
            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hec-push")

    def _exchange(self, send: torch.Tensor, sizes: list[int]) -> tuple[list[int], torch.Tensor]:
        """On the push thread: the sizes, then the payload (both all-to-all-v on ``group``)."""
        got = torch.empty(self.world, dtype=torch.int64)
        dist.all_to_all_single(got, torch.tensor(sizes, dtype=torch.int64), group=self.group)
        recv_sizes = got.tolist()
        recv = torch.empty(int(sum(recv_sizes)), dtype=torch.float32)
        dist.all_to_all_single(
            recv,
            send,
            output_split_sizes=recv_sizes,
            input_split_sizes=sizes,
            group=self.group,
        )
        return recv_sizes, recv

    def send(self, step: int, pushes: list[list[tuple[np.ndarray, torch.Tensor]]]) -> None:
        """Send ``pushes[l][r] = (ids, rows)`` (layer ``l``, peer ``r``; nothing for this
        rank): per peer, every layer's count, ids (two float32 words each) and rows packed in
        one float32 message, handed to the push thread (class docstring); returns at once."""
        parts, sizes = [], np.zeros(self.world, dtype=np.int64)
        for r in range(self.world):
            if r == self.rank:
                continue
            msg = []
            for layer, dim in enumerate(self.dims):
                ids, rows = pushes[layer][r]
                ids = np.ascontiguousarray(ids, dtype=np.int64)
                rows = rows.detach().to(torch.float32).reshape(len(ids), dim)
                msg.append(torch.tensor([float(len(ids))], dtype=torch.float32))
                msg.append(torch.from_numpy(ids.view(np.float32).copy()))
                msg.append(rows.reshape(-1))
            flat = torch.cat(msg)
            parts.append(flat)
            sizes[r] = flat.numel()
        if self.pool is None:
            done: Future = Future()
            done.set_result(([0], torch.empty(0)))
            self.flights.append(_Flight(step, done))
            return
        send = torch.cat(parts) if parts else torch.empty(0)
        self.flights.append(_Flight(step, self.pool.submit(self._exchange, send, sizes.tolist())))
        if self.stats is not None:
            self.stats.rounds += 2
            self.stats.bytes_sent += 4 * int(sizes.sum()) + 8 * (self.world - 1)
            self.stats.messages_sent += int(np.count_nonzero(sizes))

    def receive(self, step: int) -> list[list[tuple[np.ndarray, torch.Tensor]]] | None:
        """What was sent at step ``step - d`` (None when nothing was): ``[layer][peer] ->
        (ids, rows)``. Waits for it if it has not arrived yet."""
        if not self.flights or self.flights[0].step != step - self.delay:
            return None
        f = self.flights.popleft()
        sizes, data = f.future.result()
        rank = self.rank
        if self.stats is not None and self.pool is not None:
            self.stats.bytes_received += 4 * int(sum(sizes)) + 8 * (self.world - 1)
            self.stats.messages_received += int(np.count_nonzero(sizes))
        out: list[list[tuple[np.ndarray, torch.Tensor]]] = [
            [(np.empty(0, np.int64), torch.empty(0, d)) for _ in range(self.world)]
            for d in self.dims
        ]
        off = 0
        for r, size in enumerate(sizes):
            end = off + int(size)
            if r == rank or end == off:
                off = end
                continue
            pos = off
            for layer, dim in enumerate(self.dims):
                n = int(data[pos].item())
                pos += 1
                ids = data[pos : pos + 2 * n].numpy().view(np.int64).copy()
                pos += 2 * n
                rows = data[pos : pos + n * dim].reshape(n, dim)
                pos += n * dim
                out[layer][r] = (ids, rows)
            off = end
        return out

    def drain(self) -> None:
        """Complete every message still under way (end of an epoch or run)."""
        while self.flights:
            self.flights.popleft().future.result()

    def close(self) -> None:
        """Drain, then stop the push thread."""
        self.drain()
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
