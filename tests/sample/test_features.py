"""Feature gathers from memory maps into reused buffers."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.sample import FeatureGatherer, gather_rows


def test_gather_rows_from_memmap_any_order(tmp_path):
    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    np.save(tmp_path / "x.npy", x)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    ids = np.array([7, 0, 7, 3])
    assert np.array_equal(gather_rows(mm, ids), x[ids])


def test_float16_and_normalize():
    x = np.array([[1, 3], [0, 0], [2, 2]], dtype=np.float16)
    out = gather_rows(x, np.array([0, 1, 2]), normalize=True)
    assert out.dtype == np.float32
    assert np.allclose(out, [[0.25, 0.75], [0, 0], [0.5, 0.5]])


def test_gatherer_reuses_buffer_and_checks_range():
    x = np.random.default_rng(0).random((20, 3)).astype(np.float32)
    g = FeatureGatherer(x)
    a = g.gather(np.array([1, 2, 3]))
    ptr = g._buf.__array_interface__["data"][0]
    b = g.gather(np.array([4, 5]))
    assert g._buf.__array_interface__["data"][0] == ptr
    assert np.array_equal(b.numpy(), x[[4, 5]]) and a.shape == (3, 3)
    with pytest.raises(ValueError, match="row ids"):
        g.gather(np.array([20]))


def _rss_file_kib() -> int | None:
    try:
        for line in open("/proc/self/status"):
            if line.startswith("RssFile:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def test_read_rows_equals_gather_rows_on_mapped_files(tmp_path):
    from shoal.rows.gather import gather_rows, read_rows

    p = tmp_path / "x.npy"
    a = np.lib.format.open_memmap(p, mode="w+", dtype=np.float32, shape=(1000, 7))
    a[:] = np.random.default_rng(0).random((1000, 7))
    ro = np.load(p, mmap_mode="r")
    ids = np.array([5, 799, 0, 5, 17, 798])
    for src in (a, ro, ro[100:900], a[3:], np.asarray(ro)):  # writable, read-only, views, RAM
        want = np.asarray(src)[ids]
        assert np.array_equal(read_rows(src, ids), want)
        assert np.array_equal(
            read_rows(src, ids, normalize=True), gather_rows(src, ids, normalize=True)
        )
        run = np.arange(10, 60)  # consecutive rows: one read
        assert np.array_equal(
            read_rows(src, run, np.empty((64, 7), np.float32))[:50], np.asarray(src)[run]
        )
    with pytest.raises(ValueError, match="row ids"):
        read_rows(ro, np.array([1000]))


def test_read_rows_does_not_map_the_file_into_memory(tmp_path):
    from shoal.rows.gather import read_rows

    if _rss_file_kib() is None:
        pytest.skip("needs /proc/self/status (Linux)")
    p = tmp_path / "big.npy"
    a = np.lib.format.open_memmap(p, mode="w+", dtype=np.float32, shape=(40_000, 256))  # 40 MB
    a[:] = 1.0
    del a
    src = np.load(p, mmap_mode="r")
    ids = np.random.default_rng(1).choice(40_000, 3000, replace=False)
    before = _rss_file_kib()
    out = read_rows(src, ids)
    assert out.sum() == 3000 * 256
    assert _rss_file_kib() - before < 4096  # < 4 MiB of the 40 MB file joined the process


def test_read_rows_into_given_positions(tmp_path):
    from shoal.rows.gather import read_rows

    p = tmp_path / "x.npy"
    a = np.lib.format.open_memmap(p, mode="w+", dtype=np.float32, shape=(50, 3))
    a[:] = np.arange(150, dtype=np.float32).reshape(50, 3) + 1
    for src in (np.load(p, mmap_mode="r"), np.asarray(a)):
        out = np.zeros((6, 3), np.float32)
        read_rows(src, np.array([7, 2, 49]), out, at=np.array([4, 0, 2]))
        want = np.zeros((6, 3), np.float32)
        want[[4, 0, 2]] = np.asarray(src)[[7, 2, 49]]
        assert np.array_equal(out, want)
        out2 = np.zeros((6, 3), np.float32)
        read_rows(src, np.array([7, 2]), out2, at=np.array([5, 1]), normalize=True)
        rows = np.asarray(src)[[7, 2]]
        assert np.allclose(out2[[5, 1]], rows / rows.sum(1, keepdims=True))
        assert not out2[[0, 2, 3, 4]].any()
