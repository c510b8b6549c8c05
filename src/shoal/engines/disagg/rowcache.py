"""The compute worker's feature cache and the batch workers' view of it (Armada, Section 5).

"Compute Worker Feature Caching": compute workers keep frequently accessed feature rows (LRU),
so a batch worker sends only the rows that are not cached, kept informed of the cache by the
compute worker's updates, which it acknowledges. :class:`ComputeCache` numbers each batch's
change as **update** ``v`` and keeps an evicted row (**pending**) until every feeder has
acknowledged ``v``, so a batch prepared before its worker learnt of the eviction still finds
it (docs/distributed.md#disagg-armada, "Compute-worker cache"). :class:`CacheView` is the set
of rows a batch worker believes cached: the rows of a batch it prepares join it at once (the
compute worker inserts or revives every row of a batch), and the updates, applied in order,
correct the rest -- except an eviction announced before the update one of its own later
batches causes, which that batch undoes. With several feeders, a row another worker's batch
inserted is sent until the update arrives (counted as ``redundant``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["CacheView", "ComputeCache", "ProtocolError"]


class ProtocolError(RuntimeError):
    """A batch omitted a row the compute worker does not hold (a bug, never expected)."""


class ComputeCache:
    """LRU cache of feature rows of a compute worker (see the module docstring).

    Args:
        num_nodes: ids are ``0 .. num_nodes - 1``. dim: row width. capacity: live rows at most
            (0 = off: nothing is cached and every row must be sent). feeders: batch workers
            feeding this compute worker (their acknowledgements free pending rows).
    """

    def __init__(self, num_nodes: int, dim: int, capacity: int, feeders: list[int]) -> None:
        self.capacity = int(capacity)
        self.dim = dim
        self.slot_of = np.full(num_nodes, -1, np.int64)
        self.rows = np.empty((0, dim), np.float32)
        self.ids = np.empty(0, np.int64)  # id of each slot, -1 free
        self.stamp = np.empty(0, np.int64)  # last use (iteration) of live slots
        self.evicted_at = np.empty(0, np.int64)  # update that evicted a pending slot, else -1
        self.version = 0
        self.acks = {b: 0 for b in feeders}
        self.live = 0
        self.stats = {"hits": 0, "sent": 0, "redundant": 0, "peak_pending": 0}

    def _grow(self, need: int) -> None:
        n = len(self.ids)
        if need <= n:
            return
        m = max(need, 2 * n, 64)
        self.rows = np.concatenate([self.rows, np.empty((m - n, self.dim), np.float32)])
        self.ids = np.concatenate([self.ids, np.full(m - n, -1, np.int64)])
        self.stamp = np.concatenate([self.stamp, np.zeros(m - n, np.int64)])
        self.evicted_at = np.concatenate([self.evicted_at, np.full(m - n, -1, np.int64)])

    def _free(self, slots: np.ndarray) -> None:
        self.slot_of[self.ids[slots]] = -1
        self.ids[slots] = -1
        self.evicted_at[slots] = -1

    def acknowledge(self, feeder: int, version: int) -> None:
        """``feeder`` has applied every update up to ``version``: free what all have seen."""
        self.acks[feeder] = max(self.acks[feeder], int(version))
        low = min(self.acks.values())
        pending = np.flatnonzero((self.evicted_at >= 0) & (self.evicted_at <= low))
        if len(pending):
            self._free(pending)

    def end_epoch(self) -> None:
        """Every batch has been consumed: pending rows can go."""
        pending = np.flatnonzero(self.evicted_at >= 0)
        if len(pending):
            self._free(pending)
        for b in self.acks:
            self.acks[b] = self.version

    def consume(
        self, ids: np.ndarray, sent: np.ndarray, rows: np.ndarray
    ) -> tuple[np.ndarray, tuple[int, np.ndarray, np.ndarray]]:
        """The rows of ``ids`` (``sent``: positions whose rows came as ``rows``, in order;
        the others must be cached) and the update this batch causes."""
        ids = np.asarray(ids, np.int64)
        n = len(ids)
        out = np.empty((n, self.dim), np.float32)
        is_sent = np.zeros(n, bool)
        is_sent[sent] = True
        out[is_sent] = rows
        slots = self.slot_of[ids]
        miss = ~is_sent & (slots < 0)
        if miss.any():
            v = int(ids[np.flatnonzero(miss)[0]])
            raise ProtocolError(f"row {v} was neither sent nor cached (update {self.version})")
        omitted = ~is_sent
        out[omitted] = self.rows[slots[omitted]]
        self.stats["hits"] += int(omitted.sum())
        self.stats["sent"] += int(is_sent.sum())
        self.stats["redundant"] += int((is_sent & (slots >= 0)).sum())
        return out, self._update(ids, slots, out)

    def _update(self, ids: np.ndarray, slots: np.ndarray, rows: np.ndarray):
        self.version += 1
        empty = np.empty(0, np.int64)
        if self.capacity == 0:
            return self.version, empty, empty
        uniq, first = np.unique(ids, return_index=True)
        s = slots[first]
        pending = s >= 0
        pending[pending] = self.evicted_at[s[pending]] >= 0
        revived = s[pending]
        self.evicted_at[revived] = -1  # back to live
        new = uniq[s < 0]
        free = np.flatnonzero(self.ids < 0)
        if len(free) < len(new):
            self._grow(len(self.ids) + len(new) - len(free))
            free = np.flatnonzero(self.ids < 0)
        put = free[: len(new)]
        self.ids[put] = new
        self.slot_of[new] = put
        self.rows[put] = rows[first[s < 0]]
        self.evicted_at[put] = -1
        used = self.slot_of[uniq]
        self.stamp[used] = self.version
        self.live += len(new) + len(revived)
        evicted = empty
        if self.live > self.capacity:
            live = np.flatnonzero((self.ids >= 0) & (self.evicted_at < 0))
            k = self.live - self.capacity
            victims = live[np.argpartition(self.stamp[live], k - 1)[:k]]
            self.evicted_at[victims] = self.version
            evicted = self.ids[victims].copy()
            self.live -= k
        inserted = np.concatenate([new, uniq[pending]])
        pend = int(np.count_nonzero(self.evicted_at >= 0))
        self.stats["peak_pending"] = max(self.stats["peak_pending"], pend)
        return self.version, inserted, evicted

    def contents(self) -> np.ndarray:
        """Ids of the live rows (sorted)."""
        return np.sort(self.ids[(self.ids >= 0) & (self.evicted_at < 0)])


class CacheView:
    """A batch worker's view of one compute worker's cache (see the module docstring).

    Besides the rows it believes cached, it remembers for each row the update its last batch
    using the row will cause (the schedule fixes where each batch is consumed): an eviction
    announced before that update is superseded, since that batch revives the row."""

    def __init__(self, num_nodes: int, enabled: bool) -> None:
        self.enabled = enabled
        self.cached = np.zeros(num_nodes if enabled else 0, bool)
        self.last_use = np.zeros(num_nodes if enabled else 0, np.int64)
        self.version = 0

    def plan(self, ids: np.ndarray, version: int) -> np.ndarray:
        """Positions of ``ids`` whose rows must be sent in the batch the compute worker will
        consume as update ``version``; every row of the batch joins the view."""
        if not self.enabled:
            return np.arange(len(ids), dtype=np.int64)
        send = np.flatnonzero(~self.cached[ids])
        self.cached[ids] = True
        self.last_use[ids] = version
        return send

    def apply(self, version: int, inserted: np.ndarray, evicted: np.ndarray) -> None:
        """Update ``version`` (must be the next one)."""
        if version != self.version + 1:
            raise ProtocolError(f"update {version} arrived after {self.version}")
        if self.enabled:
            self.cached[inserted] = True
            self.cached[evicted[self.last_use[evicted] <= version]] = False
        self.version = version
