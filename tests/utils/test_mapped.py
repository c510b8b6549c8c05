"""read_span: a slice of a memory-mapped array read without page faults of the map."""

from __future__ import annotations

import numpy as np


def test_read_span_equals_the_slice_without_touching_the_map(tmp_path):
    from shoal.utils.mapped import mapping_of, read_span

    a = np.arange(10_000, dtype=np.int32)
    np.save(tmp_path / "a.npy", a)
    mm = np.load(tmp_path / "a.npy", mmap_mode="r")
    for lo, hi in [(0, 10_000), (17, 4099), (5000, 5000), (9999, 10_000)]:
        got = read_span(mm, lo, hi)
        assert not isinstance(got, np.memmap) and np.array_equal(got, a[lo:hi])
    assert mapping_of(read_span(mm, 3, 9)) is None
    assert np.array_equal(read_span(a, 3, 9), a[3:9])  # in memory: a copy of the slice
