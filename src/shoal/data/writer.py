"""Writing a graph directory: :class:`GraphWriter` (``docs/format.md``).

Edges are appended in chunks to a raw int64 file and post-processed when the writer closes
(``dedup`` by an external sort, downcast to int32 when ids fit); node data are checked by
:mod:`shoal.data.nodedata`; everything goes to a temporary sibling directory renamed into place
only when complete and valid.
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from shoal.data import nodedata
from shoal.data.extsort import DEFAULT_SORT_MEMORY, sort_edges_to_file
from shoal.data.layout import EDGE_FILE, FORMAT_NAME, FORMAT_VERSION, SPLITS, edge_dtype_for
from shoal.data.stream import EdgeStream
from shoal.errors import ShoalInputError
from shoal.utils.featdtype import feature_dtype as feature_dtype_of
from shoal.utils.io import atomic_output_dir, file_checksum, write_json_atomic

__all__ = ["WRITE_FIELDS", "GraphWriter", "graph_bytes"]

#: the :class:`GraphWriter` options that importers' and generators' configs have, by name
WRITE_FIELDS = ("dedup", "drop_self_loops", "sort_memory", "scratch_dir", "name", "overwrite")


def graph_bytes(
    num_nodes: int, num_edges: int, *, features: int = 0, feature_itemsize: int = 4
) -> int:
    """The bytes a graph directory of this size takes at least: its edge file (two ids per
    stored edge, the narrowest id type), features and labels. A writer that knows its sizes up
    front passes this as ``GraphWriter(need=...)``, so a disk too small is refused before
    anything is written."""
    ids = edge_dtype_for(max(num_nodes, 1)).itemsize
    return 2 * ids * num_edges + num_nodes * (features * feature_itemsize + 8)


class GraphWriter:
    """Write a graph directory from streamed pieces; atomic (temporary sibling + rename).

    Use as a context manager::

        with GraphWriter(out, num_nodes=n, directed=False) as w:
            for chunk in chunks:            # (k, 2) or int arrays of src, dst
                w.add_edges(chunk, origin="edges.txt line 1")
            w.write_features(x)             # array or iterator of row blocks
            w.write_labels(y); w.write_split("train", idx)

    Leaving the block without error finishes the directory (module docstring); an error leaves
    nothing behind.

    Args:
        out: the graph directory to create.
        num_nodes: number of nodes; default max id + 1 (known once all edges are in).
        directed: whether the graph is directed (default true). Undirected graphs store both
            directions of every edge.
        symmetrize: add the reverse of every edge (default false; implies ``directed=False``).
        dedup: drop repeated (src, dst) pairs by an external sort (default false).
        drop_self_loops: drop (v, v) edges (default false).
        sort_memory: memory cap of the external sort (default 256 MiB).
        scratch_dir: where the external sort of ``dedup`` puts its run files, in a private
            folder removed afterwards (default: beside ``out``, in its parent directory; never
            the system temp dir).
        name: dataset name stored in meta.json (default: the directory name).
        source: provenance stored in meta.json (input path, importer, command).
        overwrite: replace an existing ``out`` (default false).
        need: bytes the directory will take at least (:func:`graph_bytes`), refused up
            front when its filesystem has fewer free (default None: not checked).
        feature_dtype: the stored features' dtype, a name of
            :data:`~shoal.utils.featdtype.FEATURE_DTYPES` (default None: float16 input stays
            float16, anything else float32); :meth:`write_features`' ``dtype`` overrides it.
    """

    def __init__(
        self,
        out: str | os.PathLike,
        *,
        num_nodes: int | None = None,
        directed: bool = True,
        symmetrize: bool = False,
        dedup: bool = False,
        drop_self_loops: bool = False,
        sort_memory: int = DEFAULT_SORT_MEMORY,
        scratch_dir: str | os.PathLike | None = None,
        name: str | None = None,
        source: dict[str, Any] | None = None,
        overwrite: bool = False,
        need: int | None = None,
        feature_dtype: str | None = None,
    ) -> None:
        if feature_dtype is not None:
            feature_dtype_of(feature_dtype)  # refused before anything is written
        if num_nodes is not None and num_nodes < 0:
            raise ShoalInputError(f"num_nodes must be >= 0, got {num_nodes}")
        self.out = Path(out)
        self.num_nodes = num_nodes
        self.directed = directed and not symmetrize
        self.symmetrize = symmetrize
        self.dedup = dedup
        self.drop_self_loops = drop_self_loops
        self.sort_memory = sort_memory
        self.scratch_dir = scratch_dir
        self.name = name or self.out.name
        self.source = dict(source or {})
        self.overwrite = overwrite
        self.need = need
        self.feature_dtype = feature_dtype
        self.extra_meta: dict[str, Any] = {}
        self._ctx = None
        self.tmp: Path | None = None
        self._edges_f = None
        self._num_edges = 0
        self._max_id = -1
        self._self_loops = 0
        self._feature_dim: int | None = None
        self._feature_dtype: str | None = None
        self._num_classes: int | None = None

    # ------------------------------------------------------------------ context
    def __enter__(self) -> GraphWriter:
        self._ctx = atomic_output_dir(self.out, overwrite=self.overwrite, need=self.need)
        self.tmp = self._ctx.__enter__()
        self._edges_f = open(self.tmp / "edges.raw64", "wb")
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None:
                self._finalize()
        except BaseException:
            self._close_edges()
            self._ctx.__exit__(*sys.exc_info())
            raise
        self._close_edges()
        return bool(self._ctx.__exit__(exc_type, exc, tb))

    def _close_edges(self) -> None:
        if self._edges_f is not None and not self._edges_f.closed:
            self._edges_f.close()

    # ------------------------------------------------------------------ edges
    def add_edges(self, edges: np.ndarray, *, origin: str = "edges") -> None:
        """Append a chunk of edges: ``(k, 2)`` rows of (src, dst) or a ``(2, k)`` array.

        ``origin`` names where the chunk came from (file and first row) for error messages.
        """
        e = np.asarray(edges)
        if e.ndim != 2 or 2 not in e.shape:
            raise ShoalInputError(
                f"edges must have shape (k, 2) or (2, k), got {e.shape}", path=origin
            )
        if e.shape[1] != 2:
            e = e.T
        if e.shape[0] == 0:
            return
        if not np.issubdtype(e.dtype, np.integer):
            if np.issubdtype(e.dtype, np.floating) and np.all(np.mod(e, 1) == 0):
                e = e.astype(np.int64)
            else:
                raise ShoalInputError(
                    f"node ids must be integers, got dtype {e.dtype}",
                    path=origin,
                    fix="store node ids as integers",
                )
        e = e.astype(np.int64, copy=False)
        neg = np.flatnonzero((e < 0).any(axis=1))
        if neg.size:
            r = int(neg[0])
            raise ShoalInputError(
                f"row {r}: negative node id {e[r].tolist()}",
                path=origin,
                fix="node ids must be in [0, num_nodes)",
            )
        if self.num_nodes is not None:
            bad = np.flatnonzero((e >= self.num_nodes).any(axis=1))
            if bad.size:
                r = int(bad[0])
                raise ShoalInputError(
                    f"row {r}: node id {int(e[r].max())} is out of range for num_nodes="
                    f"{self.num_nodes} (edge {e[r].tolist()})",
                    path=origin,
                    fix="pass a larger --num-nodes, or omit it to use max id + 1",
                )
        loops = e[:, 0] == e[:, 1]
        nloops = int(loops.sum())
        if self.drop_self_loops and nloops:
            e = e[~loops]
        else:
            self._self_loops += nloops * (2 if self.symmetrize else 1)
        if e.shape[0] == 0:
            return
        self._max_id = max(self._max_id, int(e.max()))
        e = np.ascontiguousarray(e)
        e.tofile(self._edges_f)
        self._num_edges += e.shape[0]
        if self.symmetrize:
            np.ascontiguousarray(e[:, ::-1]).tofile(self._edges_f)
            self._num_edges += e.shape[0]

    # ------------------------------------------------------------------ node data
    def _resolve_num_nodes(self) -> int:
        if self.num_nodes is None:
            raise RuntimeError("num_nodes unknown: write node data after all edges, or pass it")
        return self.num_nodes

    def write_features(
        self, x: Any, *, origin: str = "features", dtype: np.dtype | str | None = None
    ) -> None:
        """Write the (N, F) feature matrix, checked and copied in row blocks.

        ``x`` is either an array (dense, scipy sparse or memory map), read in blocks of about
        64 MiB, or an iterable of consecutive 2-D row blocks (e.g. parsed from a text file),
        which is never held whole. Stored as ``dtype`` (a feature dtype name), else as the
        writer's ``feature_dtype``, else float16 stays float16 (for an array input) and anything
        else becomes float32. Rejects NaN/inf, non-numeric values and
        a row count different from num_nodes. The file is written with plain writes (no memory
        map), so resident memory stays at one block whatever the matrix size.
        """
        n = self._resolve_num_nodes()
        self._feature_dim, self._feature_dtype = nodedata.write_features(
            self.tmp / "features.npy",
            x,
            n,
            origin=origin,
            dtype=dtype if dtype is not None else self.feature_dtype,
        )

    def write_labels(
        self, y: Any, *, origin: str = "labels", num_classes: int | None = None
    ) -> None:
        """Write (N,) integer labels; -1 marks an unlabelled node. ``num_classes`` defaults to
        max label + 1; labels >= num_classes or < -1 are rejected."""
        n = self._resolve_num_nodes()
        y, self._num_classes = nodedata.check_labels(y, n, origin=origin, num_classes=num_classes)
        np.save(self.tmp / "labels.npy", y)

    def write_split(self, name: str, idx: Any, *, origin: str | None = None) -> None:
        """Write a split as node ids (or a boolean mask of length N)."""
        if name not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
        origin = origin or f"{name} split"
        a = nodedata.check_split(name, idx, self._resolve_num_nodes(), origin=origin)
        nodedata.check_splits_disjoint(name, a, self.tmp, origin=origin)
        np.save(self.tmp / f"{name}_idx.npy", a)

    def finish_edges(self) -> int:
        """Close the edge file and fix num_nodes (max id + 1 unless given); idempotent."""
        if self._edges_f is not None and not self._edges_f.closed:
            self._edges_f.close()
        if self.num_nodes is None:
            self.num_nodes = self._max_id + 1
        return self.num_nodes

    # ------------------------------------------------------------------ finalize
    def _finalize(self) -> None:
        assert self.tmp is not None
        n = self.finish_edges()
        if n == 0 and self._num_edges == 0:
            raise ShoalInputError(
                "the graph is empty (no nodes and no edges)",
                path=self.source.get("input", self.out),
                fix="check the input file, or pass --num-nodes for a graph of isolated nodes",
            )
        dtype = edge_dtype_for(max(n, 1))
        num_edges = self._write_edge_file(n, dtype)
        meta = self._meta(n, num_edges, dtype)
        files = {}
        for p in sorted(self.tmp.rglob("*")):
            if p.is_file():
                rel = p.relative_to(self.tmp).as_posix()
                files[rel] = {"bytes": p.stat().st_size, "checksum": file_checksum(p)}
        meta["files"] = files
        write_json_atomic(self.tmp / "meta.json", meta)

    def _write_edge_file(self, n: int, dtype: np.dtype) -> int:
        """Turn the raw int64 edges into ``edges.bin`` (deduplicated by an external sort when
        asked, in ``dtype``); returns the number of edges stored and fixes the self-loop count."""
        raw = self.tmp / "edges.raw64"
        stream = EdgeStream(raw, self._num_edges, np.int64)
        final = self.tmp / EDGE_FILE
        if self.dedup:
            num_edges = sort_edges_to_file(
                stream,
                final,
                dedup=True,
                out_dtype=dtype,
                memory_bytes=self.sort_memory,
                num_nodes=n,
                scratch_dir=self.scratch_dir,
                beside=self.out,
            )
        else:
            num_edges = self._num_edges
            with open(final, "wb") as f:
                for chunk in stream:
                    chunk.astype(dtype).tofile(f)
        raw.unlink()
        if self.dedup and self._self_loops:  # unknown after dedup: recount
            self._self_loops = 0
            for chunk in EdgeStream(final, num_edges, dtype):
                self._self_loops += int((chunk[:, 0] == chunk[:, 1]).sum())
        return num_edges

    def _meta(self, n: int, num_edges: int, dtype: np.dtype) -> dict[str, Any]:
        """meta.json without the file list."""
        meta: dict[str, Any] = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "name": self.name,
            "num_nodes": int(n),
            "num_edges": int(num_edges),
            "directed": bool(self.directed),
            "edge_file": EDGE_FILE,
            "edge_dtype": dtype.name,
            "edge_layout": "raw (num_edges, 2) row-major: src, dst",
            "self_loops": int(self._self_loops),
            "deduplicated": bool(self.dedup),
            "feature_dim": self._feature_dim,
            "feature_dtype": self._feature_dtype,
            "num_classes": self._num_classes,
            "splits": {},
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "source": self.source,
        }
        for s in SPLITS:
            p = self.tmp / f"{s}_idx.npy"
            if p.exists():
                meta["splits"][s] = int(np.load(p, mmap_mode="r").shape[0])
        meta.update(self.extra_meta)
        return meta
