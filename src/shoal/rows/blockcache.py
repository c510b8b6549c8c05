"""``BlockCache``: entries of a file-backed 1-D array read by blocks through a CLOCK cache.

The neighbour lists of a CSR that does not fit the memory budget are read this way by the
sampler (``NeighborSampler(direct_indices=True, neighbor_cache_bytes=...)``).
"""

from __future__ import annotations

import numpy as np

from shoal.rows import _kernels as K
from shoal.rows.direct import RowFile
from shoal.rows.opener import open_file
from shoal.utils.arrays import unique_sorted

__all__ = ["BlockCache"]


class BlockCache:
    """Entries of a file-backed 1-D array (a CSR's ``indices``) read by blocks of ``block``
    entries through a CLOCK cache of ``cache_bytes`` (Ginex's neighbour cache, Park et al.,
    VLDB 2022, Sec. 5, kept at the block level: the lists of the nodes sampled most, and
    those beside them, stay; cold blocks are read with the planned direct reads of
    :class:`RowReader`). A neighbour list of a few entries costs a 4 KiB page read whatever its
    length, so without a cache a sampled epoch reads many times the file
    (docs/measurements.md#epoch-packs-and-spooled-samples).

    Args:
        arr: the memory-mapped array (``np.load(..., mmap_mode="r")``), 1-D.
        cache_bytes: bytes of cached blocks (at least one block).
        block: entries per block (default 1024: a 4 KiB page of int32).
        threads: concurrent reads (default 8).
    """

    def __init__(
        self, arr: np.ndarray, cache_bytes: int, *, block: int = 1024, threads: int = 8
    ) -> None:
        f = RowFile.of(arr.reshape(-1, 1))
        if f is None:
            raise ValueError("BlockCache needs an array memory-mapped from a file")
        self.size = int(arr.shape[0])
        self.block = int(block)
        self.full = self.size // self.block  # whole blocks; the tail lives in memory
        isz = arr.dtype.itemsize
        self.tail = np.array(arr[self.full * self.block :])
        self.dtype = arr.dtype
        rows = RowFile(
            path=f.path,
            offset=f.offset,
            stride=self.block * isz,
            row_bytes=self.block * isz,
            num_rows=self.full,
            dim=self.block,
            dtype=arr.dtype,
        )
        self.reader = open_file(rows, threads=threads) if self.full else None
        slots = max(1, min(self.full, int(cache_bytes) // (self.block * isz)))
        self.data = np.empty((slots, self.block), dtype=arr.dtype)
        self.slot = np.full(max(self.full, 1), -1, dtype=np.int32)
        self.owner = np.full(slots, -1, dtype=np.int64)
        self.ref = np.zeros(slots, dtype=np.uint8)
        self.hand = 0
        self.requests = 0  # blocks asked for
        self.hits = 0  # of them cached

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes + self.slot.nbytes + self.owner.nbytes + self.ref.nbytes)

    @property
    def bytes_read(self) -> int:
        return 0 if self.reader is None else self.reader.stats.bytes

    def take(self, pos: np.ndarray) -> np.ndarray:
        """``arr[pos]`` (any order, repeats allowed) through the cache."""
        pos = np.asarray(pos, dtype=np.int64)
        out = np.empty(len(pos), dtype=self.dtype)
        if len(pos) and (pos.min() < 0 or pos.max() >= self.size):
            raise ValueError(f"positions must be in [0, {self.size})")
        b = pos // self.block
        tail = b >= self.full
        out[tail] = self.tail[pos[tail] - self.full * self.block]
        todo = ~tail
        need = unique_sorted(b[todo])
        have = self.slot[need] >= 0
        self.requests += len(need)
        self.hits += int(have.sum())
        self.ref[self.slot[need[have]]] = 1
        todo = self._serve(pos, b, todo, out)  # hits first: later loads may evict them
        miss = need[~have]
        cap = self.data.shape[0]
        for a in range(0, len(miss), cap):
            chunk = miss[a : a + cap]
            victims = np.empty(len(chunk), dtype=np.int64)
            self.hand = int(K._clock_victims(self.ref, self.hand, len(chunk), victims))
            old = self.owner[victims]
            self.slot[old[old >= 0]] = -1
            self.reader.read(chunk, self.data, dest=victims)
            self.slot[chunk] = victims
            self.owner[victims] = chunk
            todo = self._serve(pos, b, todo, out)
        return out

    def _serve(self, pos, b, todo, out) -> np.ndarray:
        """Fill ``out`` where ``todo`` and the block is cached; returns what is left to do."""
        s = np.full(len(pos), -1, dtype=np.int64)
        s[todo] = self.slot[b[todo]]
        ok = s >= 0
        out[ok] = self.data[s[ok], pos[ok] - b[ok] * self.block]
        return todo & ~ok

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
