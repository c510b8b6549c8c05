"""Numba kernels of the store (private; numpy arrays in, nothing else)."""

from __future__ import annotations

import numba
import numpy as np

__all__: list[str] = []


@numba.njit(cache=True)
def _edge_hash_accumulate(src: np.ndarray, dst: np.ndarray, acc: np.ndarray) -> None:
    """``acc[dst[k]] += splitmix64(src[k] << 32 | dst[k])`` (wrapping uint64 sums).

    The per-destination sum is a multiset hash of each node's in-edges: two edge multisets with
    equal sums for every node are equal with overwhelming probability (splitmix64 is a
    bijective 64-bit mixer; Steele et al., OOPSLA 2014).
    """
    for k in range(src.shape[0]):
        z = (np.uint64(src[k]) << np.uint64(32)) | np.uint64(dst[k])
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        acc[dst[k]] += z
