"""Sort-based set operations equal numpy's on ids, edge cases included."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.utils.arrays import descending_order, setdiff_sorted, union_sorted, unique_sorted


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("n, high", [(0, 5), (1, 5), (7, 1), (50, 10), (5000, 10**7)])
def test_unique_union_and_setdiff_equal_numpy(dtype, n, high):
    rng = np.random.default_rng(n + high)
    a = rng.integers(0, high, size=n).astype(dtype)
    b = rng.integers(0, high, size=n // 2 + 1).astype(dtype)
    u = unique_sorted(a)
    assert u.dtype == np.unique(a).dtype and np.array_equal(u, np.unique(a))
    v = union_sorted(a, b)
    assert v.dtype == np.union1d(a, b).dtype and np.array_equal(v, np.union1d(a, b))
    d = setdiff_sorted(a, b)
    assert d.dtype == np.setdiff1d(a, b).dtype and np.array_equal(d, np.setdiff1d(a, b))


def test_input_is_not_modified_and_2d_is_flattened():
    a = np.array([[3, 1], [3, 2]])
    before = a.copy()
    assert unique_sorted(a).tolist() == [1, 2, 3]
    assert np.array_equal(a, before)
    assert unique_sorted([5, 5, -1]).tolist() == [-1, 5]


@pytest.mark.parametrize(
    "values",
    [
        np.array([3, 1, 3, 0, 7, 1], np.float32),  # whole degrees: 16-bit keys
        np.array([3, 1, 3, 0, 70000, 1], np.int64),  # beyond 16 bits: compared
        np.array([2.5, 1, 2.5, -1], np.float64),  # fractions and negatives: compared
        np.array([5, 65535, 0, 65535], np.uint32),
        np.array([5, 1 << 33, 0], np.uint64),  # unsigned, past 16 bits: never wrapped
        np.zeros(0, np.float32),
    ],
)
def test_descending_order_is_a_stable_sort_by_decreasing_value(values):
    got = descending_order(values)
    want = sorted(range(len(values)), key=lambda i: (-float(values[i]), i))
    assert got.tolist() == want
