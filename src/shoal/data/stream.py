"""Streaming access to an on-disk edge list.

An :class:`EdgeStream` reads a raw ``(E, 2)`` row-major edge file in fixed-size chunks with
plain positioned reads into one reused buffer. It never materialises the whole edge list, and
it does not map the file either: pages of a mapped file that were touched count in the
process's resident set, so a streaming pass over a memory map would grow RSS to the file size.
:meth:`EdgeStream.memmap` is there for random access (samplers, tests).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from shoal.errors import ShoalInputError

__all__ = ["DEFAULT_CHUNK_EDGES", "EdgeStream"]

#: Default number of edges per chunk (8 MiB of int32 pairs).
DEFAULT_CHUNK_EDGES = 1 << 20


class EdgeStream:
    """Chunked reader of a raw ``(num_edges, 2)`` edge file (src, dst per row).

    Args:
        path: the raw edge file.
        num_edges: number of rows (the file must hold exactly ``num_edges * 2`` items).
        dtype: ``int32`` or ``int64``.
        chunk_edges: rows per chunk (default :data:`DEFAULT_CHUNK_EDGES`).

    Iterating yields ``(k, 2)`` arrays with ``k <= chunk_edges``. With ``copy=False`` (the
    default) the yielded array is a reused buffer, valid until the next chunk is read: copy it
    if you keep it. Use :meth:`chunks_with_offset` to know where each chunk starts.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        num_edges: int,
        dtype: np.dtype | str = np.int32,
        chunk_edges: int = DEFAULT_CHUNK_EDGES,
        *,
        copy: bool = False,
    ) -> None:
        if chunk_edges < 1:
            raise ShoalInputError(f"chunk size must be >= 1, got {chunk_edges}")
        self.path = Path(path)
        self.num_edges = int(num_edges)
        self.dtype = np.dtype(dtype)
        self.chunk_edges = int(chunk_edges)
        self.copy = copy
        expected = self.num_edges * 2 * self.dtype.itemsize
        try:
            actual = self.path.stat().st_size
        except FileNotFoundError:
            raise ShoalInputError("edge file not found", path=self.path) from None
        if actual != expected:
            raise ShoalInputError(
                f"edge file has {actual} bytes, expected {expected} "
                f"({self.num_edges} edges x 2 x {self.dtype.itemsize} bytes): truncated or corrupt",
                path=self.path,
                fix="re-import the graph",
            )

    def __len__(self) -> int:
        """Number of chunks."""
        return -(-self.num_edges // self.chunk_edges)

    def memmap(self) -> np.ndarray:
        """The whole file as a read-only ``(E, 2)`` memory map (no data is read)."""
        if self.num_edges == 0:
            return np.empty((0, 2), dtype=self.dtype)
        return np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.num_edges, 2))

    def chunks_with_offset(self) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(first_edge_index, chunk)`` pairs."""
        if self.num_edges == 0:
            return
        buf = np.empty((min(self.chunk_edges, self.num_edges), 2), dtype=self.dtype)
        row_bytes = 2 * self.dtype.itemsize
        with open(self.path, "rb", buffering=0) as f:
            for start in range(0, self.num_edges, self.chunk_edges):
                stop = min(start + self.chunk_edges, self.num_edges)
                out = buf[: stop - start]
                view = memoryview(out.reshape(-1).view(np.uint8))
                got = f.readinto(view)
                if got != (stop - start) * row_bytes:
                    raise ShoalInputError(
                        f"short read at edge {start}: file changed while reading",
                        path=self.path,
                    )
                yield start, (out.copy() if self.copy else out)

    def __iter__(self) -> Iterator[np.ndarray]:
        for _, chunk in self.chunks_with_offset():
            yield chunk

    def with_chunk(self, chunk_edges: int) -> EdgeStream:
        """The same file read with another chunk size."""
        return EdgeStream(self.path, self.num_edges, self.dtype, chunk_edges, copy=self.copy)
