"""Large arrays on huge pages: a writable array of the asked shape, its own map."""

from __future__ import annotations

import numpy as np
import pytest

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


def _faults_of_reallocating(nbytes: int, times: int) -> int:
    """Minor page faults of allocating, touching and freeing ``nbytes`` ``times`` times."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(times):
        a = np.ones(nbytes // 4, dtype=np.float32)
        del a
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_freed_memory_kept_between_steps_is_not_faulted_in_again():
    """With the thresholds :func:`return_freed_memory` fixes, a freed 16 MiB block is
    unmapped and its pages fault in again on the next allocation; kept
    (:func:`keep_freed_memory`), the next allocation reuses them."""
    nbytes, times = 16 << 20, 8
    if not memory.return_freed_memory():
        pytest.skip("no glibc")
    try:
        returned = _faults_of_reallocating(nbytes, times)
        memory.keep_freed_memory(64 << 20)
        _faults_of_reallocating(nbytes, 1)  # the heap grows once
        kept = _faults_of_reallocating(nbytes, times)
        assert returned > 4 * kept + times  # (huge pages would fault far less: still 4x)
        memory.return_freed_memory()
        memory.trim_freed_memory()
        after = _faults_of_reallocating(nbytes, times)  # returned again
        assert after > 4 * kept + times
    finally:
        memory.return_freed_memory()
