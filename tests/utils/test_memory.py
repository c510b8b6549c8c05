"""Large arrays on huge pages: a writable array of the asked shape, its own map."""

from __future__ import annotations

import numpy as np

from shoal.utils import memory
from shoal.utils.memory import huge_empty


def test_a_large_array_gets_its_own_advised_map(monkeypatch):
    monkeypatch.setattr(memory, "HUGE_MIN_BYTES", 4096)
    a = huge_empty((1000, 3), np.float32)
    assert a.shape == (1000, 3) and a.dtype == np.float32 and a.flags.c_contiguous
    assert not a.flags.owndata and a.flags.writeable  # a view of its own map
    a[:] = 7.0
    assert float(a.sum()) == 21000.0


def test_a_small_array_is_an_ordinary_one():
    a = huge_empty((10, 2), np.int16)
    assert a.shape == (10, 2) and a.dtype == np.int16 and a.flags.owndata


def test_huge_zeros_are_zero_large_or_small(monkeypatch):
    monkeypatch.setattr(memory, "HUGE_MIN_BYTES", 4096)
    for shape in ((2000, 3), (5, 2)):
        a = memory.huge_zeros(shape, np.float32)
        assert a.shape == shape and not a.any()
