"""Which of consecutive id ranges an id falls in, inside numba kernels (a typed graph's node
types are the ranges ``offsets[t] .. offsets[t + 1] - 1``; :mod:`shoal.data.hetero`)."""

from __future__ import annotations

import numba

__all__ = ["range_index"]


@numba.njit(cache=True, inline="always")
def range_index(offsets, v):
    """The ``t`` with ``offsets[t] <= v < offsets[t + 1]`` (``offsets`` ascending, ``(T + 1,)``;
    binary search: ``O(log T)``, no per-id array)."""
    x, y = 0, offsets.shape[0] - 1
    while y - x > 1:
        m = (x + y) >> 1
        if offsets[m] <= v:
            x = m
        else:
            y = m
    return x
