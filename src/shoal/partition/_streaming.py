"""Shared pieces of the streaming edge (vertex-cut) partitioners: argument checks, the edge
pass with a progress bar, the on-disk edge->part output, degree counting and a hash mixer.

Private to :mod:`shoal.partition`; numba kernels are private functions over numpy arrays.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable

import numpy as np
from numba import njit

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.partition.base import Assignment, Partitioner
from shoal.partition.vertexcut import owners_from_edge_parts
from shoal.utils.io import scratch_space
from shoal.utils.progress import progress


def _check_inputs(
    graph: GraphDir, num_parts: int, train_mask: np.ndarray | None
) -> np.ndarray | None:
    """Refuse more parts than nodes; ``train_mask`` as a checked bool (N,) array (or None)."""
    if graph.num_nodes > 0 and num_parts > graph.num_nodes:
        raise ShoalInputError(
            f"num_parts={num_parts} is larger than the number of nodes ({graph.num_nodes})",
            path=graph.path,
            fix=f"use --parts <= {graph.num_nodes}",
        )
    if train_mask is None:
        return None
    n = graph.num_nodes
    t = np.asarray(train_mask, dtype=bool)
    if t.shape != (n,):
        raise ShoalInputError(f"train mask has shape {t.shape}, expected ({n},)", path="train_mask")
    return t


def _part_dtype(num_parts: int) -> np.dtype:
    return np.dtype(np.int16 if num_parts <= np.iinfo(np.int16).max else np.int32)


class _EdgePartFile:
    """Write the edge -> part array chunk by chunk to a temporary ``.npy`` file.

    The file lives in a private scratch directory (:func:`shoal.utils.io.scratch_space`)
    inside ``scratch_dir``, else beside ``beside`` (the graph directory): a disk the user
    chose, never the system temp dir. Written with plain file writes (a written memory map
    would count in RSS); :meth:`finish` memory-maps it read-only and unlinks the file and its
    directory (the mapping keeps the data alive, the disk space is freed when the array is
    dropped). ``read(start, out)`` reads a range back with a positioned read (for multi-pass
    algorithms) before :meth:`finish`.
    """

    def __init__(
        self,
        num_edges: int,
        num_parts: int,
        *,
        scratch_dir: str | os.PathLike | None,
        beside: str | os.PathLike,
    ) -> None:
        self.num_edges = int(num_edges)
        self.dtype = _part_dtype(num_parts)
        self._scratch = contextlib.ExitStack()
        d = self._scratch.enter_context(
            scratch_space(scratch_dir, beside=beside, prefix="shoal-edge-part")
        )
        try:
            fd, name = tempfile.mkstemp(prefix="edge-part-", suffix=".npy", dir=d)
        except BaseException:
            self._scratch.close()
            raise
        self.path = name
        self._f = os.fdopen(fd, "w+b")
        np.lib.format.write_array_header_1_0(
            self._f,
            {
                "descr": np.lib.format.dtype_to_descr(self.dtype),
                "fortran_order": False,
                "shape": (self.num_edges,),
            },
        )
        self._header = self._f.tell()
        self.written = 0

    def write(self, parts: np.ndarray) -> None:
        a = np.ascontiguousarray(parts, dtype=self.dtype)
        a.tofile(self._f)
        self.written += a.shape[0]

    def read(self, start: int, out: np.ndarray) -> np.ndarray:
        self._f.flush()
        view = memoryview(out.reshape(-1).view(np.uint8))
        got = os.preadv(self._f.fileno(), [view], self._header + start * self.dtype.itemsize)
        if got != out.nbytes:
            raise RuntimeError(f"short read in {self.path}")
        return out

    def finish(self) -> np.ndarray:
        self._f.close()
        try:
            if self.written != self.num_edges:
                raise RuntimeError(f"wrote {self.written} edge parts, expected {self.num_edges}")
            if self.num_edges == 0:
                return np.empty(0, dtype=self.dtype)
            return np.load(self.path, mmap_mode="r")
        finally:
            os.unlink(self.path)
            self._scratch.close()

    def discard(self) -> None:
        if not self._f.closed:
            self._f.close()
        if os.path.exists(self.path):
            os.unlink(self.path)
        self._scratch.close()


def _vertex_cut(
    partitioner: Partitioner,
    graph: GraphDir,
    edge_part: np.ndarray,
    seconds: dict[str, float],
) -> Assignment:
    """The :class:`Assignment` of a vertex-cut pass: every node's owner is the part holding
    most of its edges (ties to the lowest index; nodes without edges fill the lightest parts),
    by :func:`shoal.partition.vertexcut.owners_from_edge_parts`, timed as ``owners`` after
    ``seconds``. Training-node balance is left to the pipeline's balance post-pass."""
    cfg = partitioner.config
    t = time.perf_counter()
    node_part = owners_from_edge_parts(graph, edge_part, cfg.num_parts, chunk_edges=cfg.chunk_edges)
    seconds = {**seconds, "owners": time.perf_counter() - t}
    return partitioner.assignment(node_part, seconds, edge_part=edge_part)


def _edge_pass(graph: GraphDir, chunk_edges: int, desc: str):
    """Chunks of the edge file with a progress bar: yields ``(start, src, dst)``."""
    bar = progress(total=graph.num_edges, desc=desc, unit="edge")
    try:
        for start, chunk in graph.edge_stream(chunk_edges).chunks_with_offset():
            yield start, chunk[:, 0], chunk[:, 1]
            bar.update(chunk.shape[0])
    finally:
        bar.close()


@njit(cache=True)
def _mix(x):
    # splitmix64 finaliser (Steele, Lea, Flood 2014)
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def _degree_chunk(src, dst, deg):
    for i in range(src.shape[0]):
        deg[src[i]] += 1
        if dst[i] != src[i]:
            deg[dst[i]] += 1


def _degrees(graph: GraphDir, chunk_edges: int, desc: str = "degrees") -> np.ndarray:
    """Undirected degree of every node (both directions counted, self-loops once)."""
    deg = np.zeros(graph.num_nodes, dtype=np.int64)
    for _, src, dst in _edge_pass(graph, chunk_edges, desc):
        _degree_chunk(src, dst, deg)
    return deg


def _assign_edges(
    graph: GraphDir,
    num_parts: int,
    chunk_edges: int,
    desc: str,
    fill: Callable[[np.ndarray, np.ndarray, np.ndarray], None],
    *,
    scratch_dir: str | os.PathLike | None,
) -> np.ndarray:
    """One streaming pass: ``fill(src, dst, out)`` writes the part of every edge of a chunk
    into ``out`` (a reused buffer); the parts go to an :class:`_EdgePartFile` in
    ``scratch_dir`` (None: beside the graph directory), whose read-only map is returned
    (nothing is left on disk, also on error)."""
    sink = _EdgePartFile(graph.num_edges, num_parts, scratch_dir=scratch_dir, beside=graph.path)
    try:
        out = np.empty(min(chunk_edges, max(graph.num_edges, 1)), dtype=sink.dtype)
        for _, src, dst in _edge_pass(graph, chunk_edges, desc):
            o = out[: src.shape[0]]
            fill(src, dst, o)
            sink.write(o)
    except BaseException:
        sink.discard()
        raise
    return sink.finish()
