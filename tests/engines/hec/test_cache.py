"""The historical embedding cache (DistGNN-MB Sec. 3.2) and its delayed push (Algorithms 1-2)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.engines.hec.cache import DelayedPush, HistoricalCache, halo_database, select_push
from tests.distributed.helpers import run_world


def _rows(ids, dim=2, scale=1.0):
    ids = np.asarray(ids, dtype=np.float32)
    return np.stack([ids * scale + j for j in range(dim)], 1)


def test_store_then_lookup_returns_the_rows_stored():
    c = HistoricalCache(universe=np.array([10, 20, 30, 40]), dim=2, size=4, lifespan=2)
    assert c.store(np.array([30, 10]), _rows([30, 10]), now=0) == 2
    hit, lines = c.lookup(np.array([10, 20, 30, 99]), now=0)
    assert hit.tolist() == [True, False, True, False]  # 20 never stored, 99 not a halo node
    assert np.array_equal(c.load(lines).numpy(), _rows([10, 30]))


def test_same_tag_is_overwritten_in_place():
    c = HistoricalCache(universe=np.array([1, 2, 3]), dim=2, size=2, lifespan=5)
    c.store(np.array([1, 2]), _rows([1, 2]), now=0)
    line = c.lookup(np.array([1]), now=0)[1][0]
    c.store(np.array([1]), _rows([1], scale=100.0), now=1)
    hit, lines = c.lookup(np.array([1, 2]), now=1)
    assert hit.all() and lines[0] == line  # the same line, new row
    assert np.array_equal(c.load(lines[:1]).numpy(), _rows([1], scale=100.0))
    assert np.array_equal(c.load(lines[1:]).numpy(), _rows([2]))


def test_oldest_line_is_replaced_first():
    c = HistoricalCache(universe=np.arange(10), dim=2, size=3, lifespan=100)
    c.store(np.array([0]), _rows([0]), now=0)
    c.store(np.array([1]), _rows([1]), now=1)
    c.store(np.array([2]), _rows([2]), now=2)
    c.store(np.array([0]), _rows([0]), now=3)  # 0 refreshed: 1 is now the oldest
    c.store(np.array([5]), _rows([5]), now=4)
    hit, _ = c.lookup(np.arange(6), now=4)
    assert np.flatnonzero(hit).tolist() == [0, 2, 5]
    c.store(np.array([6, 7]), _rows([6, 7]), now=5)  # the two oldest: 2, then 0
    hit, lines = c.lookup(np.arange(10), now=5)
    assert np.flatnonzero(hit).tolist() == [5, 6, 7]
    assert np.array_equal(c.load(lines).numpy(), _rows([5, 6, 7]))


def test_more_tags_than_lines_keeps_what_fits():
    c = HistoricalCache(universe=np.arange(10), dim=2, size=2, lifespan=1)
    assert c.store(np.array([3, 4, 5]), _rows([3, 4, 5]), now=0) == 2
    hit, lines = c.lookup(np.arange(10), now=0)
    assert hit.sum() == 2
    assert np.array_equal(c.load(lines).numpy(), _rows(np.flatnonzero(hit)))


def test_lines_expire_after_the_lifespan():
    c = HistoricalCache(universe=np.arange(4), dim=1, size=4, lifespan=2)
    c.store(np.array([0, 1]), _rows([0, 1], dim=1), now=3)
    for now, valid in [(3, True), (4, True), (5, True), (6, False), (9, False)]:
        hit, _ = c.lookup(np.array([0, 1]), now=now)
        assert hit.tolist() == [valid, valid], now
        assert c.valid_lines(now) == (2 if valid else 0)
    c.store(np.array([2]), _rows([2], dim=1), now=6)  # an expired line is replaced first
    assert c.lookup(np.array([2]), now=6)[0].tolist() == [True]


def test_unknown_tag_cannot_be_stored_and_size_is_capped_by_the_halo():
    c = HistoricalCache(universe=np.array([5, 7]), dim=3, size=1_000_000)
    assert c.capacity == 2 and c.rows.shape == (2, 3)
    with pytest.raises(ValueError, match="not a halo node"):
        c.store(np.array([6]), np.zeros((1, 3)), now=0)
    empty = HistoricalCache(universe=np.empty(0, np.int64), dim=3)
    assert empty.capacity == 0 and empty.lookup(np.array([1]), now=0)[0].tolist() == [False]
    assert empty.store(np.empty(0, np.int64), np.zeros((0, 3)), now=0) == 0
    with pytest.raises(ValueError):
        HistoricalCache(universe=np.arange(3), dim=1, size=0)


def test_select_push_limits_and_prefers_high_degree():
    solid = np.arange(100, dtype=np.int64)
    db = np.arange(0, 100, 2)  # the even nodes are halo on the peer
    deg = np.where(solid < 50, 0.0, 1000.0)
    rng = np.random.default_rng(0)
    assert np.array_equal(select_push(solid, db, deg, None, rng), db)
    assert np.array_equal(select_push(solid, db, deg, 50, rng), db)
    counts = np.zeros(100)
    for _ in range(200):
        got = select_push(solid, db, deg, 10, rng)
        assert len(got) == 10 == len(np.unique(got)) and np.isin(got, db).all()
        counts[got] += 1
    assert counts[50:].sum() > 20 * counts[:50].sum()  # weight 1001 against 1
    assert len(select_push(solid, db, deg, 0, rng)) == 0
    assert len(select_push(solid, np.empty(0, np.int64), deg, 5, rng)) == 0


# ----------------------------------------------------------------- real process groups
def _owner(ids: np.ndarray, world: int) -> np.ndarray:
    return np.asarray(ids) % world  # node v lives on rank v mod world


def _db(rank: int, world: int) -> list:
    rng = np.random.default_rng(rank)
    halo = np.unique(rng.integers(0, 40, 12))
    halo = halo[_owner(halo, world) != rank]
    db = halo_database(halo, _owner(halo, world), world)
    return [halo.tolist(), [d.tolist() for d in db]]


@pytest.mark.parametrize("world", [1, 2, 4])
def test_halo_database_is_the_transpose_of_the_halo_sets(world):
    res = run_world(_db, world)
    for r in range(world):
        halo_r = set(res[r][0])
        for q in range(world):
            expect = sorted(v for v in halo_r if v % world == q) if q != r else []
            # rank q's db for rank r: q's solid nodes that are halo on r
            assert res[q][1][r] == (expect if q != r else [])


def _push(rank: int, world: int, delay: int, steps: int) -> list:
    dims = [3, 2]
    p = DelayedPush(dims, world, delay)
    got = []
    for k in range(steps):
        rec = p.receive(k)
        got.append(
            None
            if rec is None
            else [[(ids.tolist(), rows.numpy().tolist()) for ids, rows in layer] for layer in rec]
        )
        pushes = []
        for layer, dim in enumerate(dims):
            per = []
            for r in range(world):
                n = 0 if r == rank else (k + r + layer) % 3  # empty messages too
                ids = np.arange(n, dtype=np.int64) + 1000 * rank + 100 * k
                # each row names its node, step and layer: a permuted row cannot pass
                rows = torch.from_numpy(ids.astype(np.float32))[:, None] * 10 + layer
                rows = rows + torch.arange(dim, dtype=torch.float32) / 4
                per.append((ids, rows))
            pushes.append(per)
        if k < steps - delay:
            p.send(k, pushes)
    p.drain()
    return got


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("delay", [1, 2])
def test_a_push_at_step_k_arrives_at_step_k_plus_d_and_not_before(world, delay):
    steps = 5
    res = run_world(_push, world, delay, steps)
    for q in range(world):
        for k in range(steps):
            rec = res[q][k]
            if k < delay:
                assert rec is None
                continue
            sent = k - delay
            for layer, dim in enumerate([3, 2]):
                for r in range(world):
                    ids, rows = rec[layer][r]
                    n = 0 if r == q else (sent + q + layer) % 3
                    assert ids == (np.arange(n) + 1000 * r + 100 * sent).tolist()
                    assert rows == [[v * 10.0 + layer + j / 4 for j in range(dim)] for v in ids]
