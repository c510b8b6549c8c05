"""A set of int64 ids sized to its members, not to the id space.

Distributed components that must remember which nodes they have seen (a window's rows, an
epoch's) would otherwise keep a mark per node of the whole graph (1 byte x ``N`` on every
rank, whatever the rank's share). :class:`IdSet` is an open-addressing hash table (linear
probing, Fibonacci hashing: Knuth, TAOCP vol. 3, 6.4) of at most half load, with its members
also kept in insertion order, so that clearing and listing cost ``O(members)``. Memory: 24
bytes per member at most (the table's 8-byte slots at half load, and the member list).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["IdSet", "probe_slot"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@numba.njit(cache=True, inline="always")
def probe_slot(keys, u, shift):
    """The slot of ``u`` in the open-addressing table ``keys`` (-1: empty; a power-of-two
    size, ``shift = 64 - log2(size)``): where it is, or the empty slot it would take. Shared
    by :class:`IdSet` and the sampler's hashed id map (a numba kernel over numpy arrays)."""
    mask = keys.shape[0] - 1
    h = np.int64((np.uint64(u) * _GOLDEN) >> shift)
    while keys[h] != -1 and keys[h] != u:
        h = (h + 1) & mask
    return h


@numba.njit(cache=True, nogil=True)
def _add(keys, shift, members, n, ids, new):
    """Insert ``ids``; ``new[i]`` whether ``ids[i]`` was not a member before (its first
    occurrence in ``ids`` only). Returns the new member count."""
    for i in range(ids.shape[0]):
        u = ids[i]
        h = probe_slot(keys, u, shift)
        if keys[h] == u:
            new[i] = False
        else:
            keys[h] = u
            members[n] = u
            n += 1
            new[i] = True
    return n


@numba.njit(cache=True, nogil=True)
def _contains(keys, shift, ids, out):
    for i in range(ids.shape[0]):
        out[i] = keys[probe_slot(keys, ids[i], shift)] == ids[i]


@numba.njit(cache=True, nogil=True)
def _rehash(keys, shift, members, n):
    for i in range(n):
        keys[probe_slot(keys, members[i], shift)] = members[i]


@numba.njit(cache=True, nogil=True)
def _clear(keys, shift, members, n):
    # latest first: a member's probe path holds only members inserted before it, all still
    # in place when it is found (the table is only ever filled in member order)
    for i in range(n - 1, -1, -1):
        keys[probe_slot(keys, members[i], shift)] = -1


class IdSet:
    """Non-negative int64 ids; ``add`` returns which were new, ``contains`` tests, ``members``
    lists them in insertion order, ``clear`` empties it in ``O(members)``."""

    def __init__(self, capacity: int = 1024) -> None:
        size = 1 << max(4, (2 * max(capacity, 1) - 1).bit_length())
        self._alloc(size)
        self.members_buf = np.empty(max(capacity, 16), np.int64)
        self.n = 0

    def _alloc(self, size: int) -> None:
        self.keys = np.full(size, -1, np.int64)
        self.shift = np.uint64(64 - (size.bit_length() - 1))

    def __len__(self) -> int:
        return self.n

    def _fit(self, count: int) -> None:
        if count > self.members_buf.shape[0]:
            grown = np.empty(max(count, 2 * self.members_buf.shape[0]), np.int64)
            grown[: self.n] = self.members_buf[: self.n]
            self.members_buf = grown
        if 2 * count > self.keys.shape[0]:
            size = self.keys.shape[0]
            while 2 * count > size:
                size *= 2
            self._alloc(size)
            _rehash(self.keys, self.shift, self.members_buf, self.n)

    def add(self, ids: np.ndarray) -> np.ndarray:
        """Insert ``ids``; returns a bool mask of those not in the set before (the first
        occurrence of a repeated new id only)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        self._fit(self.n + len(ids))
        new = np.empty(len(ids), np.bool_)
        self.n = int(_add(self.keys, self.shift, self.members_buf, self.n, ids, new))
        return new

    def contains(self, ids: np.ndarray) -> np.ndarray:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        out = np.empty(len(ids), np.bool_)
        _contains(self.keys, self.shift, ids, out)
        return out

    def members(self) -> np.ndarray:
        """The members in insertion order (a view: valid until the next change)."""
        return self.members_buf[: self.n]

    def clear(self) -> None:
        _clear(self.keys, self.shift, self.members_buf, self.n)
        self.n = 0

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.members_buf.nbytes)
