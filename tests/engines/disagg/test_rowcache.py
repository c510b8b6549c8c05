"""The compute worker's LRU feature cache and the batch workers' view (Armada Section 5)."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.engines.disagg.rowcache import CacheView, ComputeCache, ProtocolError

N, DIM = 50, 3
TABLE = np.arange(N * DIM, dtype=np.float32).reshape(N, DIM)


def _send(view: CacheView, ids: np.ndarray, version: int = 0):
    sent = view.plan(ids, version)
    return sent, TABLE[ids[sent]]


def test_lru_evicts_the_least_recently_used_row():
    c = ComputeCache(N, DIM, capacity=2, feeders=[0])
    _, (_, ins, ev) = c.consume(np.array([1, 2]), np.array([0, 1]), TABLE[[1, 2]])
    assert sorted(ins.tolist()) == [1, 2] and ev.tolist() == []
    c.consume(np.array([1]), np.array([], np.int64), TABLE[[]])  # 1 used again: 2 is oldest
    _, (v, ins, ev) = c.consume(np.array([3]), np.array([0]), TABLE[[3]])
    assert ins.tolist() == [3] and ev.tolist() == [2] and v == 3
    assert c.contents().tolist() == [1, 3]


def test_an_evicted_row_stays_until_every_feeder_acknowledges():
    c = ComputeCache(N, DIM, capacity=1, feeders=[0, 1])
    c.consume(np.array([5]), np.array([0]), TABLE[[5]])  # update 1
    c.consume(np.array([6]), np.array([0]), TABLE[[6]])  # update 2 evicts 5
    # feeder 1 has seen update 1 only and omits 5: still served (pending)
    c.acknowledge(1, 1)
    x, _ = c.consume(np.array([5]), np.array([], np.int64), TABLE[[]])
    assert np.array_equal(x, TABLE[[5]])
    c.consume(np.array([7]), np.array([0]), TABLE[[7]])
    c.consume(np.array([8]), np.array([0]), TABLE[[8]])
    c.acknowledge(0, c.version)
    c.acknowledge(1, c.version)
    with pytest.raises(ProtocolError):  # 5 was evicted and acknowledged: gone
        c.consume(np.array([5]), np.array([], np.int64), TABLE[[]])


def test_capacity_zero_caches_nothing():
    c = ComputeCache(N, DIM, capacity=0, feeders=[0])
    v = CacheView(N, enabled=False)
    for ids in (np.array([1, 2]), np.array([1, 2])):
        sent, rows = _send(v, ids)
        assert sent.tolist() == [0, 1]
        x, (_, ins, ev) = c.consume(ids, sent, rows)
        assert np.array_equal(x, TABLE[ids]) and len(ins) == len(ev) == 0


@pytest.mark.parametrize(
    "feeders, lag, capacity", [(1, 0, 8), (1, 3, 8), (2, 2, 8), (3, 4, 5), (2, 0, 30)]
)
def test_protocol_rows_always_equal_the_table(feeders, lag, capacity):
    """Feeders take turns; updates reach them ``lag`` batches late. Every row used equals the
    table; with one feeder a cached row is never sent again."""
    rng = np.random.default_rng(lag * 7 + feeders)
    c = ComputeCache(N, DIM, capacity, feeders=list(range(feeders)))
    views = [CacheView(N, enabled=True) for _ in range(feeders)]
    updates = []
    for i in range(200):
        f = i % feeders
        for u in updates[views[f].version : max(len(updates) - lag, 0)]:
            views[f].apply(*u)
        ids = np.unique(rng.choice(N, size=rng.integers(1, 12), p=np.linspace(2, 0.1, N) / 52.5))
        sent, rows = _send(views[f], ids, c.version + 1)
        c.acknowledge(f, views[f].version)
        before = set(c.contents().tolist())
        x, u = c.consume(ids, sent, rows)
        assert np.array_equal(x, TABLE[ids])
        if feeders == 1:  # a row that was cached is never sent twice
            assert not (set(ids[sent].tolist()) & before)
        assert len(c.contents()) <= capacity
        updates.append(u)
    assert c.stats["hits"] > 0
    if feeders == 1:
        assert c.stats["redundant"] == 0
    c.end_epoch()
    assert not (c.evicted_at >= 0).any()


def test_updates_must_arrive_in_order():
    v = CacheView(N, enabled=True)
    v.apply(1, np.array([1]), np.array([], np.int64))
    with pytest.raises(ProtocolError):
        v.apply(3, np.array([2]), np.array([], np.int64))
