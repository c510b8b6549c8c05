"""The budgeted feature store: exactly the rows of the memory map, within its budget."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.errors import ShoalInputError
from shoal.rows.budget import MIN_WINDOW, RESERVE, plan_budget
from shoal.rows.featstore import DiskFeatures, presampled_priority


@pytest.fixture
def feats(tmp_path):
    x = np.random.default_rng(0).standard_normal((5000, 24)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    return x, np.load(tmp_path / "x.npy", mmap_mode="r")


@pytest.mark.parametrize("cache_rows", [0, 1, 777, 5000, 9999])
def test_windows_return_exact_rows(feats, cache_rows):
    x, mm = feats
    rng = np.random.default_rng(cache_rows)
    prio = rng.permutation(len(x))
    fs = DiskFeatures(mm, cache_bytes=cache_rows * 24 * 4, priority=prio, threads=2)
    assert fs.cached_rows == min(cache_rows, len(x))
    assert fs.cache.nbytes <= cache_rows * 24 * 4  # never above its budget
    batches = [
        rng.integers(0, len(x), 300),  # repeated ids
        np.empty(0, np.int64),  # empty batch
        np.array([0, len(x) - 1, 0, len(x) - 1]),  # the borders
        np.arange(len(x)),
    ]
    w = fs.window(batches)
    assert w.rows.shape[0] == len(np.unique(fs.cold_of(np.concatenate(batches))))
    for b in batches:
        assert np.array_equal(w.gather(b), x[b])
        assert np.array_equal(fs.gather(b).numpy(), x[b])
    assert fs.stats.requested == 2 * sum(len(b) for b in batches)
    if cache_rows < len(x):  # a row outside the cache and the window is an error
        w1 = fs.window([np.array([1])])
        with pytest.raises(KeyError, match="neither cached nor in the window"):
            w1.gather(np.arange(len(x)))


def test_cache_holds_the_priority_rows(feats):
    x, mm = feats
    prio = np.argsort(-x[:, 0])
    fs = DiskFeatures(mm, cache_bytes=100 * 24 * 4, priority=prio)
    assert set(np.flatnonzero(fs.slot >= 0)) == set(prio[:100].tolist())
    assert np.array_equal(fs.cache, x[np.sort(prio[:100])])


def test_normalize(tmp_path):
    y = np.abs(np.random.default_rng(1).standard_normal((50, 6))).astype(np.float32)
    y[7] = 0
    np.save(tmp_path / "y.npy", y)
    fs = DiskFeatures(np.load(tmp_path / "y.npy", mmap_mode="r"), normalize=True)
    ids = np.array([5, 9, 5, 7])
    ref = y[ids] / np.maximum(y[ids].sum(1, keepdims=True), 1e-30)
    assert np.allclose(fs.gather(ids).numpy(), ref, rtol=1e-5)


def test_in_memory_array_is_served_whole():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    fs = DiskFeatures(x)
    assert fs.cached_rows == 4 and fs.reader is None
    assert np.array_equal(fs.gather(np.array([3, 0, 3])).numpy(), x[[3, 0, 3]])
    with pytest.raises(ValueError, match="row ids"):
        fs.gather(np.array([4]))


def test_budget_plan_and_minimum():
    gib = 1 << 30
    p = plan_budget(4 * gib, feature_bytes=5 * gib, structure_bytes=gib // 2)
    assert p.structure_in_memory
    assert p.cache + 2 * p.window + p.structure + p.reserve <= 4 * gib
    assert p.window >= MIN_WINDOW and p.cache > 0
    whole = plan_budget(8 * gib, feature_bytes=2 * gib, structure_bytes=gib)
    assert whole.cache == 2 * gib  # everything cached
    tight = plan_budget(RESERVE + 3 * MIN_WINDOW, feature_bytes=gib, structure_bytes=gib)
    assert not tight.structure_in_memory and tight.cache + 2 * tight.window <= 3 * MIN_WINDOW
    with pytest.raises(ShoalInputError, match="--memory") as e:
        plan_budget(RESERVE, feature_bytes=gib, structure_bytes=0)
    assert "minimum working set" in str(e.value)


@pytest.mark.parametrize("halo_in_memory", [False, True])
@pytest.mark.parametrize("cache_rows", [0, 100, 700])
def test_stacked_core_and_halo_rows(tmp_path, halo_in_memory, cache_rows):
    """A part's core rows and halo rows as one stacked matrix: exact rows on random batches
    with repeats, ids at the border of the two files, and an empty batch."""
    rng = np.random.default_rng(5)
    core = rng.random((500, 6)).astype(np.float32)
    halo = rng.random((200, 6)).astype(np.float32)
    np.save(tmp_path / "core.npy", core)
    np.save(tmp_path / "halo.npy", halo)
    h = halo if halo_in_memory else np.load(tmp_path / "halo.npy", mmap_mode="r")
    fs = DiskFeatures(
        [np.load(tmp_path / "core.npy", mmap_mode="r"), h],
        cache_bytes=cache_rows * 24,
        priority=rng.permutation(700),
    )
    full = np.concatenate([core, halo])
    assert fs.num_rows == 700 and fs.cache_bytes == min(cache_rows, 700) * 24
    batches = [rng.integers(0, 700, 300), np.array([499, 500, 499, 500, 0, 699]), np.empty(0)]
    w = fs.window(batches)
    for ids in batches:
        ids = ids.astype(np.int64)
        np.testing.assert_array_equal(w.gather(ids), full[ids])
        np.testing.assert_array_equal(fs.gather(ids).numpy(), full[ids])
    fs.close()


def test_stacked_in_memory_members_are_concatenated():
    a, b = np.ones((3, 2), np.float32), np.zeros((2, 2), np.float32)
    fs = DiskFeatures([a, b])
    np.testing.assert_array_equal(fs.gather(np.array([4, 0, 3])).numpy(), [[0, 0], [1, 1], [0, 0]])
    with pytest.raises(ValueError, match="agree"):
        DiskFeatures([a, np.ones((2, 3), np.float32)])


def test_presampled_priority_orders_by_count_then_by_the_given_order():
    counts = np.array([0, 3, 1, 3, 0], np.uint16)
    prio = np.array([4, 3, 2, 1, 0], np.int32)
    np.testing.assert_array_equal(presampled_priority(counts, prio), [3, 1, 2, 4, 0])
    assert presampled_priority(np.zeros(0, np.uint16), np.zeros(0, np.int32)).size == 0
