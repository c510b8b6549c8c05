"""fit_windows against trying every cache size, and hand-made cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

import shoal.rows.windowfit as windowfit


def _fit_reference(pool, needed, priority, rb, sample, min_window, margin, batch=0):
    """Every cache size tried in turn: the largest that lets an epoch's uncached rows and
    samples fit one slot (overlap), else both slots (one window), else both slots next to
    a few batches sampled again (resample), else the default thirds."""
    d = int(needed.sum())
    best: dict[str, list[int]] = {}
    for k in range(len(needed) + 1):
        u = d - int(needed[priority[:k]].sum())
        need = math.ceil(margin * u) * rb
        free = pool - k * rb
        if free >= 0 and (free - 3 * sample) // 2 >= max(need, min_window):
            best.setdefault("overlap", []).append(k)  # two windows + three epochs' samples
        if free >= 0 and free - 2 * sample >= max(need, 2 * min_window):
            best.setdefault("one", []).append(k)  # one window + two epochs' samples
        if free >= 0 and free - windowfit.RESAMPLE_BATCHES * batch >= max(need, 2 * min_window):
            best.setdefault("resample", []).append(k)  # one window + a few batches
    for mode in ("overlap", "one", "resample"):
        if mode in best:  # the largest within a third of the pool, else the smallest
            within = [k for k in best[mode] if k * rb <= pool // 3]
            return mode, (within[-1] if within else best[mode][0]) * rb
    w = max(min_window, pool // 3)
    return "split", max(0, pool - 2 * w) // rb * rb


def test_fit_windows_hand_made():
    needed = np.zeros(100, bool)
    needed[:40] = True  # the first 40 priority rows are all an epoch needs
    f = windowfit.fit_windows(
        1000, needed=needed, priority=np.arange(100), row_bytes=10, min_window=10, margin=1.0
    )
    # any cache fits; the largest within a third of the pool (33 rows) leaves 7 rows to read
    assert (f.mode, f.cache_bytes, f.window_bytes, f.uncached_rows) == ("overlap", 330, 335, 7)
    assert (f.epoch_rows, f.pool) == (40, 1000)
    f = windowfit.fit_windows(
        1000,
        needed=needed,
        priority=np.arange(100)[::-1],
        row_bytes=10,
        sample_bytes=50,
        min_window=10,
        margin=1.0,
    )
    # needed rows come last in the priority order (a cache of k <= 60 rows holds none): 40
    # rows fit a slot of (1000 - 10 k - 3 * 50) / 2 bytes while k <= 5
    assert (f.mode, f.cache_bytes, f.uncached_rows, f.window_bytes) == ("overlap", 50, 40, 400)
    needed[:] = True
    f = windowfit.fit_windows(
        500, needed=needed, priority=np.arange(100), row_bytes=10, min_window=10
    )
    assert (f.mode, f.cache_bytes, f.window_bytes) == ("split", 160, 166)  # thirds
    f = windowfit.fit_windows(
        500,
        needed=needed,
        priority=np.arange(100),
        row_bytes=10,
        min_window=10,
        split_cache_share=windowfit.PACKED_CACHE_SHARE,
    )
    # packed: 0.6 of the pool to the cache, two slots of (500 - 300) / 2 = 100 bytes
    assert (f.mode, f.cache_bytes, f.window_bytes) == ("split", 300, 100)
    needed[50:] = False
    f = windowfit.fit_windows(
        900,
        needed=needed,
        priority=np.arange(100),
        row_bytes=10,
        sample_bytes=200,
        min_window=10,
        margin=1.0,
    )
    # 50 - k rows never fit a slot of (900 - 10 k - 3 * 200) / 2 bytes, but fit both slots,
    # 900 - 10 k - 2 * 200 bytes, for k <= 48; a third of the pool is 30 rows
    assert (f.mode, f.cache_bytes, f.window_bytes, f.uncached_rows) == ("one", 300, 100, 20)
    assert not f.resample
    f = windowfit.fit_windows(
        900,
        needed=needed,
        priority=np.arange(100),
        row_bytes=10,
        sample_bytes=300,
        batch_bytes=20,
        min_window=10,
        margin=1.0,
    )
    # two epochs' samples (600 B) leave 300 - 10 k bytes for 50 - k rows: never; six
    # batches sampled again (120 B) leave 780 - 10 k: always; the largest cache within a
    # third of the pool (30 rows) leaves two slots of (900 - 300 - 120) / 2 bytes
    assert (f.mode, f.resample, f.cache_bytes, f.window_bytes) == ("one", True, 300, 240)
    assert "sampled again" in f.describe()


@pytest.mark.parametrize("seed", range(12))
def test_fit_windows_matches_trying_every_cache_size(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    needed = rng.random(n) < rng.random()
    priority = rng.permutation(n)
    rb = int(rng.integers(1, 64))
    pool = int(rng.integers(0, 2 * n * rb + 1))
    sample = int(rng.integers(0, n * rb // 2 + 1))
    batch = int(rng.integers(0, sample // 4 + 1))
    mw = int(rng.integers(1, max(2, pool // 4 + 1)))
    margin = float(rng.choice([1.0, 1.05, 1.3]))
    f = windowfit.fit_windows(
        pool,
        needed=needed,
        priority=priority,
        row_bytes=rb,
        sample_bytes=sample,
        batch_bytes=batch,
        min_window=mw,
        margin=margin,
        steps=n,
    )
    mode, cache = _fit_reference(pool, needed, priority, rb, sample, mw, margin, batch)
    assert (f.mode, f.cache_bytes, f.resample) == (
        "one" if mode == "resample" else mode,
        cache,
        mode == "resample",
    )
    assert f.epoch_rows == int(needed.sum())
    if f.mode != "split":  # what was promised fits the pool
        windows, held = (2, 3 * sample) if f.mode == "overlap" else (1, 2 * sample)
        if f.resample:
            held = windowfit.RESAMPLE_BATCHES * batch
        rows = math.ceil(margin * f.uncached_rows) * rb
        assert f.cache_bytes + windows * rows + held <= pool
        assert f.cache_bytes + 2 * f.window_bytes + held <= pool
