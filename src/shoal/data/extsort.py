"""Bounded-memory external sort of an edge file, and CSR views built from it
(docs/format.md#csr-views).

A two-phase external merge sort of ``uint64`` keys ``primary << 32 | secondary``: sorted runs
of ``R = cap / 40`` edges (optionally without duplicates) written to a private scratch folder
(``scratch_dir``, default beside the output; never the system temp dir), then a merge that
keeps one block of ``B = cap / (24 k)`` keys per run and repeatedly emits, sorted, the keys
not larger than the smallest "last loaded key" among unfinished runs (no later key can be
smaller), refilling the blocks that ran dry; the merged slice is decoded for the sink in
pieces of 1 Mi keys. Memory is ``O(R + k * B)`` keys plus the sink's O(V) state, whatever
the number of edges. Node ids must be < 2**32.

:func:`build_csr_files` writes the ``indptr``/``indices`` views: ``in`` = in-edges grouped by
destination (``indices`` are sources), ``out`` = out-edges grouped by source; neighbour lists
come out sorted.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from shoal.data.stream import EdgeStream
from shoal.errors import ShoalInputError
from shoal.utils.diskspace import open_output_memmap
from shoal.utils.io import scratch_space
from shoal.utils.progress import progress

__all__ = ["DEFAULT_SORT_MEMORY", "build_csr_files", "external_sort", "sort_edges_to_file"]

#: Default memory cap of the external sort (bytes).
DEFAULT_SORT_MEMORY = 256 * 2**20
_MIN_MEMORY = 2**20
# bytes per edge while a run is built: int64 pair read (16) + key (8) + temporaries (16)
_RUN_BYTES_PER_EDGE = 40
_SHIFT = np.uint64(32)
# keys decoded and handed to the sink at a time during the merge
_SINK_SLICE = 1 << 20
_LOW = np.uint64(0xFFFFFFFF)

Sink = Callable[[np.ndarray, np.ndarray], None]


def _runs_size(memory_bytes: int) -> int:
    return max(1024, memory_bytes // _RUN_BYTES_PER_EDGE)


def _dedup_sorted(keys: np.ndarray, last: int | None) -> np.ndarray:
    if keys.size == 0:
        return keys
    keep = np.empty(keys.size, dtype=bool)
    keep[0] = last is None or keys[0] != last
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]


def _write_runs(
    stream: EdgeStream, work: Path, *, by: str, dedup: bool, run_edges: int
) -> list[tuple[Path, int]]:
    """Phase 1: sorted (and, with ``dedup``, duplicate-free) runs of packed keys in ``work``;
    returns ``(path, number of keys)`` per run."""
    p_col, s_col = (0, 1) if by == "src" else (1, 0)
    runs: list[tuple[Path, int]] = []
    src = stream.with_chunk(run_edges)
    for i, chunk in enumerate(progress(src, total=len(src), desc=f"sort runs (by {by})")):
        keys = chunk[:, p_col].astype(np.uint64)
        keys <<= _SHIFT
        keys |= chunk[:, s_col].astype(np.uint64)
        keys.sort()
        if dedup:
            keys = _dedup_sorted(keys, None)
        path = work / f"run{i:06d}.u64"
        keys.tofile(path)
        runs.append((path, int(keys.size)))
        del keys
    return runs


class _RunBlocks:
    """One in-memory block of up to ``block`` keys per run, refilled as they run dry."""

    def __init__(self, runs: list[tuple[Path, int]], block: int) -> None:
        self.runs = runs
        self.block = block
        self.pos = [0] * len(runs)
        self.bufs: list[np.ndarray] = [np.empty(0, np.uint64)] * len(runs)
        for j in range(len(runs)):
            self.refill(j)

    def refill(self, j: int) -> None:
        path, n = self.runs[j]
        if self.pos[j] < n and self.bufs[j].size == 0:
            stop = min(self.pos[j] + self.block, n)
            self.bufs[j] = np.fromfile(
                path, dtype=np.uint64, count=stop - self.pos[j], offset=8 * self.pos[j]
            )
            self.pos[j] = stop

    def take_final(self, active: list[int]) -> np.ndarray:
        """Remove and return, sorted, every loaded key that no unloaded key can precede."""
        # every key <= bound is final: unfinished runs continue above their last loaded key
        unfinished = [self.bufs[j][-1] for j in active if self.pos[j] < self.runs[j][1]]
        bound = min(unfinished) if unfinished else None
        parts = []
        for j in active:
            b = self.bufs[j]
            cut = b.size if bound is None else int(np.searchsorted(b, bound, side="right"))
            if cut:
                parts.append(b[:cut])
                self.bufs[j] = b[cut:]
        if len(parts) == 1:
            return parts[0]
        out = np.concatenate(parts)  # sorted in place: no second copy of the merged slice
        out.sort()
        return out


def _merge_runs(
    runs: list[tuple[Path, int]], sink: Sink, *, by: str, dedup: bool, memory_bytes: int
) -> int:
    """Phase 2: k-way merge of the runs into ``sink``; returns the number of keys emitted."""
    k = len(runs)
    if k == 0:
        return 0
    blocks = _RunBlocks(runs, max(1024, memory_bytes // (3 * 8 * k)))
    last_emitted: int | None = None
    emitted = 0
    bar = progress(total=sum(n for _, n in runs), desc=f"sort merge (by {by})", unit="edge")
    while True:
        active = [j for j in range(k) if blocks.bufs[j].size]
        if not active:
            break
        out = blocks.take_final(active)
        bar.update(out.size)
        if dedup:
            out = _dedup_sorted(out, last_emitted)
        if out.size:
            last_emitted = int(out[-1])
            # hand the slice to the sink in bounded pieces: the decoded (primary, secondary)
            # pairs and the sink's own temporaries stay O(_SINK_SLICE)
            for s in range(0, out.size, _SINK_SLICE):
                piece = out[s : s + _SINK_SLICE]
                sink((piece >> _SHIFT).view(np.int64), (piece & _LOW).view(np.int64))
            emitted += int(out.size)
        del out
        for j in active:
            blocks.refill(j)
    bar.close()
    return emitted


def external_sort(
    stream: EdgeStream,
    sink: Sink,
    *,
    by: str = "src",
    dedup: bool = False,
    memory_bytes: int = DEFAULT_SORT_MEMORY,
    scratch_dir: str | os.PathLike | None = None,
    beside: str | os.PathLike | None = None,
    num_nodes: int | None = None,
    show_progress: bool | None = None,
) -> int:
    """Sort the edges of ``stream`` by ``(by, other)`` and feed them to ``sink`` in order.

    Args:
        stream: the edge stream to sort.
        sink: called as ``sink(primary, secondary)`` with consecutive sorted slices
            (``uint64``-derived ``int64`` arrays, valid only during the call).
        by: ``"src"`` (sort by source, then destination) or ``"dst"`` (default ``"src"``).
        dedup: drop repeated ``(src, dst)`` pairs (default false).
        memory_bytes: memory cap of runs plus merge blocks (default 256 MiB).
        scratch_dir: directory that receives the run files, in a private
            ``.extsort-scratch.tmp-XXXX`` folder removed when the sort ends (default: beside
            ``beside``; never the system temp dir, which is often RAM-backed).
        beside: the path the scratch folder goes beside (in its parent directory) when
            ``scratch_dir`` is None (default: the edge file).
        num_nodes: if given, ids are checked to be < 2**32.
    Returns:
        The number of edges emitted.
    """
    if by not in ("src", "dst"):
        raise ValueError(f"by must be 'src' or 'dst', got {by!r}")
    if num_nodes is not None and num_nodes > 2**32:
        raise ShoalInputError(
            f"external sort supports up to 2**32 nodes, got {num_nodes}", path=stream.path
        )
    memory_bytes = max(int(memory_bytes), _MIN_MEMORY)
    near = beside if beside is not None else stream.path
    with scratch_space(scratch_dir, beside=near, prefix="extsort") as work:
        runs = _write_runs(stream, work, by=by, dedup=dedup, run_edges=_runs_size(memory_bytes))
        return _merge_runs(runs, sink, by=by, dedup=dedup, memory_bytes=memory_bytes)


def sort_edges_to_file(
    stream: EdgeStream,
    out_path: str | os.PathLike,
    *,
    by: str = "src",
    dedup: bool = False,
    out_dtype: np.dtype | str | None = None,
    memory_bytes: int = DEFAULT_SORT_MEMORY,
    num_nodes: int | None = None,
    scratch_dir: str | os.PathLike | None = None,
    beside: str | os.PathLike | None = None,
) -> int:
    """Write the edges of ``stream`` sorted by ``by`` to a raw ``(E, 2)`` (src, dst) file.

    The sort's run files go to ``scratch_dir`` (default: beside ``beside``, else beside
    ``out_path``; see :func:`external_sort`). Returns the number of edges written (fewer than
    the input when ``dedup`` drops some).
    """
    dtype = np.dtype(out_dtype or stream.dtype)
    with open(out_path, "wb") as f:

        def sink(primary: np.ndarray, secondary: np.ndarray) -> None:
            rows = np.empty((primary.size, 2), dtype=dtype)
            if by == "src":
                rows[:, 0], rows[:, 1] = primary, secondary
            else:
                rows[:, 0], rows[:, 1] = secondary, primary
            rows.tofile(f)

        return external_sort(
            stream,
            sink,
            by=by,
            dedup=dedup,
            memory_bytes=memory_bytes,
            num_nodes=num_nodes,
            scratch_dir=scratch_dir,
            beside=beside if beside is not None else out_path,
        )


def build_csr_files(
    stream: EdgeStream,
    num_nodes: int,
    out_dir: str | os.PathLike,
    *,
    kind: str = "in",
    memory_bytes: int = DEFAULT_SORT_MEMORY,
    indices_dtype: np.dtype | str | None = None,
    scratch_dir: str | os.PathLike | None = None,
    beside: str | os.PathLike | None = None,
) -> tuple[Path, Path]:
    """Write ``indptr.npy`` (int64, N + 1) and ``indices.npy`` into ``out_dir``.

    ``kind="in"`` groups edges by destination (row ``v`` lists the sources of ``v``'s
    in-edges); ``kind="out"`` groups by source. Memory: the external sort's cap plus the O(V)
    ``indptr``. The sort's run files go to ``scratch_dir`` (default: beside ``beside``, else
    beside ``out_dir``; see :func:`external_sort`).
    """
    if kind not in ("in", "out"):
        raise ValueError(f"kind must be 'in' or 'out', got {kind!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    dtype = np.dtype(indices_dtype or stream.dtype)
    counts = np.zeros(num_nodes + 1, dtype=np.int64)
    # write the .npy header, then append the sorted indices with plain writes (no mapping,
    # so the resident set stays bounded whatever the file size)
    header = open_output_memmap(out_dir / "indices.npy", dtype, (stream.num_edges,))
    offset = header.offset
    del header
    with open(out_dir / "indices.npy", "r+b") as f:
        f.seek(offset)

        def sink(primary: np.ndarray, secondary: np.ndarray) -> None:
            starts = np.flatnonzero(np.r_[True, primary[1:] != primary[:-1]])
            counts[primary[starts] + 1] += np.diff(np.r_[starts, primary.size])
            secondary.astype(dtype, copy=False).tofile(f)

        written = external_sort(
            stream,
            sink,
            by="dst" if kind == "in" else "src",
            memory_bytes=memory_bytes,
            num_nodes=num_nodes,
            scratch_dir=scratch_dir,
            beside=beside if beside is not None else out_dir,
        )
    if written != stream.num_edges:  # pragma: no cover - defensive
        raise RuntimeError(f"CSR build wrote {written} of {stream.num_edges} edges")
    np.cumsum(counts, out=counts)
    np.save(out_dir / "indptr.npy", counts)
    return out_dir / "indptr.npy", out_dir / "indices.npy"
