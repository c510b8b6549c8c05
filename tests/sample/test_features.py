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
