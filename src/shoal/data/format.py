"""The graph directory: shoal's single on-disk input format (specified in ``docs/format.md``).

A graph directory holds::

    meta.json           format_version, counts, dtypes, per-file checksums, provenance
    edges.bin           raw (E, 2) row-major src,dst pairs; int32 when ids fit, else int64
    features.npy        (N, F) float32 or float16                              (optional)
    labels.npy          (N,) int64; -1 = unlabelled                             (optional)
    train_idx.npy, val_idx.npy, test_idx.npy   sorted int64 node ids         (optional)
    csr_in/{indptr,indices}.npy    in-edges grouped by destination           (optional)
    csr_out/{indptr,indices}.npy   out-edges grouped by source               (optional)

:class:`GraphDir` opens one (everything memory-mapped, nothing loaded), :class:`GraphWriter`
writes one from streamed chunks into a temporary sibling directory and renames it into place
only when it is complete and valid.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shoal.data.extsort import DEFAULT_SORT_MEMORY, build_csr_files, sort_edges_to_file
from shoal.data.stream import DEFAULT_CHUNK_EDGES, EdgeStream
from shoal.errors import ShoalInputError
from shoal.utils.io import atomic_output_dir, file_checksum, read_json, write_json_atomic

__all__ = ["CSR", "FORMAT_VERSION", "SPLITS", "GraphDir", "GraphWriter", "edge_dtype_for"]

FORMAT_VERSION = 1
FORMAT_NAME = "shoal-graph"
SPLITS = ("train", "val", "test")
EDGE_FILE = "edges.bin"
INT32_MAX = np.iinfo(np.int32).max


def edge_dtype_for(num_nodes: int) -> np.dtype:
    """int32 when every id fits, else int64."""
    return np.dtype(np.int32 if num_nodes - 1 <= INT32_MAX else np.int64)


@dataclass(frozen=True)
class CSR:
    """A compressed-sparse-row view: row ``v`` is ``indices[indptr[v]:indptr[v + 1]]``.

    ``kind="in"``: rows are destinations, indices are sources (in-neighbours).
    ``kind="out"``: rows are sources, indices are destinations (out-neighbours).
    Both arrays are read-only memory maps.
    """

    indptr: np.ndarray
    indices: np.ndarray
    kind: str

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    def neighbors(self, v: int) -> np.ndarray:
        return self.indices[self.indptr[v] : self.indptr[v + 1]]


class GraphDir:
    """A graph directory opened for reading. Nothing is loaded until asked for.

    Use :meth:`open`; properties mirror ``meta.json``. ``edge_stream()`` gives chunked edge
    passes, ``csr("in")``/``csr("out")`` the sorted adjacency views (built on first use with a
    bounded-memory external sort), ``features()`` a memory map of the feature matrix.
    """

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        self.path = path
        self.meta = meta

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | os.PathLike, *, verify: bool = False) -> GraphDir:
        path = Path(path)
        if not path.is_dir():
            raise ShoalInputError(
                "not a graph directory (no such directory)",
                path=path,
                fix="create one with `shoal data import` or `shoal data synth`",
            )
        meta_path = path / "meta.json"
        if not meta_path.exists():
            raise ShoalInputError(
                "not a graph directory: meta.json is missing",
                path=path,
                fix="create one with `shoal data import` or `shoal data synth`",
            )
        meta = read_json(meta_path)
        if meta.get("format") != FORMAT_NAME:
            raise ShoalInputError(
                f"meta.json: field 'format' is {meta.get('format')!r}, expected {FORMAT_NAME!r}",
                path=meta_path,
                fix="point at a directory written by `shoal data import` or `shoal data synth`",
            )
        version = meta.get("format_version")
        if version != FORMAT_VERSION:
            raise ShoalInputError(
                f"meta.json: format_version {version} is not supported (this shoal reads "
                f"{FORMAT_VERSION})",
                path=meta_path,
                fix="re-import the graph with this version of shoal",
            )
        g = cls(path, meta)
        if verify:
            g.verify()
        return g

    def verify(self) -> None:
        """Check every file listed in ``meta.json`` against its size and checksum."""
        for name, info in self.meta.get("files", {}).items():
            p = self.path / name
            if not p.exists():
                raise ShoalInputError(f"file {name} listed in meta.json is missing", path=p)
            if p.stat().st_size != info["bytes"]:
                raise ShoalInputError(
                    f"file {name} has {p.stat().st_size} bytes, meta.json says {info['bytes']}",
                    path=p,
                    fix="the file is truncated or corrupt; re-import the graph",
                )
            if file_checksum(p) != info["checksum"]:
                raise ShoalInputError(
                    f"checksum mismatch in {name}",
                    path=p,
                    fix="the file is corrupt; re-import the graph",
                )

    # ------------------------------------------------------------------ properties
    @property
    def name(self) -> str:
        return str(self.meta.get("name") or self.path.name)

    @property
    def num_nodes(self) -> int:
        return int(self.meta["num_nodes"])

    @property
    def num_edges(self) -> int:
        return int(self.meta["num_edges"])

    @property
    def directed(self) -> bool:
        return bool(self.meta["directed"])

    @property
    def edge_dtype(self) -> np.dtype:
        return np.dtype(self.meta["edge_dtype"])

    @property
    def feature_dim(self) -> int | None:
        return self.meta.get("feature_dim")

    @property
    def num_classes(self) -> int | None:
        return self.meta.get("num_classes")

    # ------------------------------------------------------------------ edges
    def edge_stream(self, chunk_edges: int = DEFAULT_CHUNK_EDGES) -> EdgeStream:
        """A chunked reader over ``edges.bin`` (``(k, 2)`` src,dst chunks)."""
        return EdgeStream(
            self.path / self.meta.get("edge_file", EDGE_FILE),
            self.num_edges,
            self.edge_dtype,
            chunk_edges,
        )

    def has_csr(self, kind: str) -> bool:
        return (self.path / f"csr_{kind}" / "indptr.npy").exists()

    def csr(self, kind: str = "in", *, build: bool = True, memory_bytes: int | None = None) -> CSR:
        """The ``in`` or ``out`` CSR view, memory-mapped; built (and recorded) if missing."""
        if kind not in ("in", "out"):
            raise ValueError(f"kind must be 'in' or 'out', got {kind!r}")
        if not self.has_csr(kind):
            if not build:
                raise ShoalInputError(
                    f"no csr_{kind} view", path=self.path, fix=f"run `shoal data csr {self.path}`"
                )
            self.build_csr(kind, memory_bytes=memory_bytes or DEFAULT_SORT_MEMORY)
        d = self.path / f"csr_{kind}"
        return CSR(
            np.load(d / "indptr.npy", mmap_mode="r"),
            np.load(d / "indices.npy", mmap_mode="r"),
            kind,
        )

    def build_csr(self, kind: str = "in", *, memory_bytes: int = DEFAULT_SORT_MEMORY) -> None:
        """Build ``csr_<kind>/`` with a bounded-memory external sort and record its checksums.

        The view is written to a temporary sibling folder and renamed into place; meta.json
        is then rewritten atomically with the new files' checksums.
        """
        final = self.path / f"csr_{kind}"
        with atomic_output_dir(final, overwrite=True) as tmp:
            build_csr_files(
                self.edge_stream(),
                self.num_nodes,
                tmp,
                kind=kind,
                memory_bytes=memory_bytes,
                indices_dtype=self.edge_dtype,
            )
        files = dict(self.meta.get("files", {}))
        for fname in ("indptr.npy", "indices.npy"):
            p = final / fname
            files[f"csr_{kind}/{fname}"] = {"bytes": p.stat().st_size, "checksum": file_checksum(p)}
        self.meta["files"] = files
        write_json_atomic(self.path / "meta.json", self.meta)

    def degrees(self, chunk_edges: int = DEFAULT_CHUNK_EDGES) -> tuple[np.ndarray, np.ndarray]:
        """(out_degree, in_degree) as int64 arrays, by one streaming pass (or from CSR views)."""
        n = self.num_nodes
        if self.has_csr("in") and self.has_csr("out"):
            return self.csr("out").degree().astype(np.int64), self.csr("in").degree().astype(
                np.int64
            )
        out_deg = np.zeros(n, dtype=np.int64)
        in_deg = np.zeros(n, dtype=np.int64)
        for chunk in self.edge_stream(chunk_edges):
            out_deg += np.bincount(chunk[:, 0], minlength=n)
            in_deg += np.bincount(chunk[:, 1], minlength=n)
        return out_deg, in_deg

    # ------------------------------------------------------------------ node data
    def _npy(self, name: str) -> np.ndarray | None:
        p = self.path / name
        return np.load(p, mmap_mode="r") if p.exists() else None

    def features(self) -> np.ndarray | None:
        """The (N, F) feature matrix as a read-only memory map, or None."""
        return self._npy("features.npy")

    def labels(self) -> np.ndarray | None:
        """The (N,) int64 labels (-1 = unlabelled) as a memory map, or None."""
        return self._npy("labels.npy")

    def split(self, name: str) -> np.ndarray | None:
        """Sorted node ids of split ``train``/``val``/``test`` (memory map), or None."""
        if name not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
        return self._npy(f"{name}_idx.npy")

    def mask(self, name: str) -> np.ndarray:
        """Boolean (N,) mask of a split (all false when the split is absent)."""
        m = np.zeros(self.num_nodes, dtype=bool)
        idx = self.split(name)
        if idx is not None:
            m[np.asarray(idx)] = True
        return m

    def __repr__(self) -> str:
        return (
            f"GraphDir({str(self.path)!r}, num_nodes={self.num_nodes}, "
            f"num_edges={self.num_edges}, directed={self.directed})"
        )


class GraphWriter:
    """Write a graph directory from streamed pieces; atomic (temporary sibling + rename).

    Use as a context manager::

        with GraphWriter(out, num_nodes=n, directed=False) as w:
            for chunk in chunks:            # (k, 2) or int arrays of src, dst
                w.add_edges(chunk, origin="edges.txt line 1")
            w.write_features(x)             # array or iterator of row blocks
            w.write_labels(y); w.write_split("train", idx)

    On leaving the block without error, edges are post-processed (``dedup`` by an external
    sort; downcast to int32 when ids fit), node data are checked against ``num_nodes``,
    checksums are computed, ``meta.json`` is written and the directory is renamed into place.
    On error nothing is left behind.

    Args:
        out: the graph directory to create.
        num_nodes: number of nodes; default max id + 1 (known once all edges are in).
        directed: whether the graph is directed (default true). Undirected graphs store both
            directions of every edge.
        symmetrize: add the reverse of every edge (default false; implies ``directed=False``).
        dedup: drop repeated (src, dst) pairs by an external sort (default false).
        drop_self_loops: drop (v, v) edges (default false).
        sort_memory: memory cap of the external sort (default 256 MiB).
        name: dataset name stored in meta.json (default: the directory name).
        source: provenance stored in meta.json (input path, importer, command).
        overwrite: replace an existing ``out`` (default false).
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
        name: str | None = None,
        source: dict[str, Any] | None = None,
        overwrite: bool = False,
    ) -> None:
        if num_nodes is not None and num_nodes < 0:
            raise ShoalInputError(f"num_nodes must be >= 0, got {num_nodes}")
        self.out = Path(out)
        self.num_nodes = num_nodes
        self.directed = directed and not symmetrize
        self.symmetrize = symmetrize
        self.dedup = dedup
        self.drop_self_loops = drop_self_loops
        self.sort_memory = sort_memory
        self.name = name or self.out.name
        self.source = dict(source or {})
        self.overwrite = overwrite
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
        self._ctx = atomic_output_dir(self.out, overwrite=self.overwrite)
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
        which is never held whole. float16 stays float16 (for an array input), anything else
        becomes float32 unless ``dtype`` says otherwise. Rejects NaN/inf, non-numeric values and
        a row count different from num_nodes. The file is written with plain writes (no memory
        map), so resident memory stays at one block whatever the matrix size.
        """
        n = self._resolve_num_nodes()
        if hasattr(x, "ndim") and hasattr(x, "shape"):
            if x.ndim != 2:
                raise ShoalInputError(
                    f"features must be 2-D (N, F), got shape {x.shape}",
                    path=origin,
                    fix="store one feature row per node",
                )
            if x.shape[0] != n:
                raise ShoalInputError(
                    f"features have {x.shape[0]} rows but the graph has num_nodes={n}",
                    path=origin,
                    fix="give one feature row per node (or pass --num-nodes to match)",
                )
            out_dtype = (
                np.dtype(dtype)
                if dtype is not None
                else (np.dtype(np.float16) if x.dtype == np.float16 else np.dtype(np.float32))
            )
            block = max(1, (64 * 2**20) // max(1, x.shape[1] * 4))
            blocks: Any = (x[s : min(n, s + block)] for s in range(0, n, block))
            num_cols: int | None = int(x.shape[1])
        else:
            out_dtype = np.dtype(dtype) if dtype is not None else np.dtype(np.float32)
            blocks = iter(x)
            num_cols = None
        path = self.tmp / "features.npy"
        written = 0
        f = None
        try:
            for rows in blocks:
                if hasattr(rows, "toarray"):
                    rows = rows.toarray()
                rows = np.asarray(rows)
                if rows.ndim == 1 and num_cols is None:
                    rows = rows.reshape(-1, 1)
                if rows.ndim != 2 or (num_cols is not None and rows.shape[1] != num_cols):
                    raise ShoalInputError(
                        f"row {written}: feature block has shape {rows.shape}, expected "
                        f"(k, {num_cols})",
                        path=origin,
                        fix="every feature row must have the same number of columns",
                    )
                if not (np.issubdtype(rows.dtype, np.number) or rows.dtype == bool):
                    raise ShoalInputError(
                        f"features must be numeric, got {rows.dtype}",
                        path=origin,
                        fix="store features as a float array",
                    )
                if f is None:
                    num_cols = int(rows.shape[1])
                    hdr = np.lib.format.open_memmap(
                        path, mode="w+", dtype=out_dtype, shape=(n, num_cols)
                    )
                    offset = hdr.offset
                    del hdr
                    f = open(path, "r+b")
                    f.seek(offset)
                if written + rows.shape[0] > n:
                    raise ShoalInputError(
                        f"features have more than {n} rows but the graph has num_nodes={n}",
                        path=origin,
                        fix="give one feature row per node (or pass --num-nodes to match)",
                    )
                finite = np.isfinite(rows)
                if not finite.all():
                    r, c = np.argwhere(~finite)[0]
                    raise ShoalInputError(
                        f"row {written + int(r)}, column {int(c)}: feature is {rows[r, c]}",
                        path=origin,
                        fix="replace NaN/inf features (e.g. with 0) before importing",
                    )
                np.ascontiguousarray(rows, dtype=out_dtype).tofile(f)
                written += rows.shape[0]
        finally:
            if f is not None:
                f.close()
        if written != n:
            path.unlink(missing_ok=True)
            raise ShoalInputError(
                f"features have {written} rows but the graph has num_nodes={n}",
                path=origin,
                fix="give one feature row per node (or pass --num-nodes to match)",
            )
        self._feature_dim = int(num_cols or 0)
        self._feature_dtype = out_dtype.name

    def write_labels(
        self, y: Any, *, origin: str = "labels", num_classes: int | None = None
    ) -> None:
        """Write (N,) integer labels; -1 marks an unlabelled node. ``num_classes`` defaults to
        max label + 1; labels >= num_classes or < -1 are rejected."""
        n = self._resolve_num_nodes()
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.ndim != 1 or y.shape[0] != n:
            raise ShoalInputError(
                f"labels have shape {y.shape}, expected ({n},) (one label per node)",
                path=origin,
                fix="give one integer label per node (-1 = unlabelled)",
            )
        if np.issubdtype(y.dtype, np.floating):
            nan = np.isnan(y)
            if (np.mod(y[~nan], 1) != 0).any():
                r = int(np.flatnonzero(~nan & (np.mod(np.nan_to_num(y), 1) != 0))[0])
                raise ShoalInputError(
                    f"row {r}: label {y[r]} is not an integer",
                    path=origin,
                    fix="labels must be integer classes (-1 = unlabelled)",
                )
            y = np.where(nan, -1, y).astype(np.int64)
        elif not np.issubdtype(y.dtype, np.integer):
            raise ShoalInputError(
                f"labels must be integers, got dtype {y.dtype}",
                path=origin,
                fix="labels must be integer classes (-1 = unlabelled)",
            )
        y = y.astype(np.int64)
        labelled = y[y >= 0]
        c = int(labelled.max()) + 1 if labelled.size else 0
        if num_classes is None:
            num_classes = c
        bad = np.flatnonzero((y < -1) | (y >= num_classes))
        if bad.size:
            r = int(bad[0])
            raise ShoalInputError(
                f"row {r}: label {int(y[r])} is out of range [0, {num_classes})",
                path=origin,
                fix="labels must be 0..num_classes-1, or -1 for unlabelled nodes",
            )
        np.save(self.tmp / "labels.npy", y)
        self._num_classes = int(num_classes)

    def write_split(self, name: str, idx: Any, *, origin: str | None = None) -> None:
        """Write a split as node ids (or a boolean mask of length N)."""
        if name not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
        origin = origin or f"{name} split"
        n = self._resolve_num_nodes()
        a = np.asarray(idx)
        if a.dtype == bool:
            if a.shape != (n,):
                raise ShoalInputError(
                    f"{name} mask has shape {a.shape}, expected ({n},)",
                    path=origin,
                    fix="give one mask entry per node",
                )
            a = np.flatnonzero(a)
        if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
            raise ShoalInputError(
                f"{name} split must be a 1-D array of node ids, got {a.dtype} {a.shape}",
                path=origin,
                fix="give the split as integer node ids or a boolean mask",
            )
        a = a.astype(np.int64)
        bad = np.flatnonzero((a < 0) | (a >= n))
        if bad.size:
            r = int(bad[0])
            raise ShoalInputError(
                f"row {r}: {name} node id {int(a[r])} is out of range [0, {n})",
                path=origin,
                fix="split node ids must be in [0, num_nodes); check --num-nodes",
            )
        a = np.sort(a)
        dup = np.flatnonzero(a[1:] == a[:-1])
        if dup.size:
            raise ShoalInputError(
                f"{name} split lists node {int(a[dup[0]])} twice",
                path=origin,
                fix="list every split node once",
            )
        for other in SPLITS:
            p = self.tmp / f"{other}_idx.npy"
            if other != name and p.exists():
                common = np.intersect1d(a, np.load(p), assume_unique=True)
                if common.size:
                    raise ShoalInputError(
                        f"{name} and {other} splits overlap ({common.size} nodes, e.g. node "
                        f"{int(common[0])})",
                        path=origin,
                        fix="make the train/val/test splits disjoint",
                    )
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
        raw = self.tmp / "edges.raw64"
        dtype = edge_dtype_for(max(n, 1))
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
            )
            if self._self_loops:
                self._self_loops = -1  # unknown after dedup; recounted below
        else:
            num_edges = self._num_edges
            with open(final, "wb") as f:
                for chunk in stream:
                    chunk.astype(dtype).tofile(f)
        raw.unlink()
        if self._self_loops == -1:
            self._self_loops = 0
            for chunk in EdgeStream(final, num_edges, dtype):
                self._self_loops += int((chunk[:, 0] == chunk[:, 1]).sum())
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
        files = {}
        for p in sorted(self.tmp.rglob("*")):
            if p.is_file():
                rel = p.relative_to(self.tmp).as_posix()
                files[rel] = {"bytes": p.stat().st_size, "checksum": file_checksum(p)}
        meta["files"] = files
        write_json_atomic(self.tmp / "meta.json", meta)


def remove_graph_dir(path: str | os.PathLike) -> None:
    """Delete a graph directory (used by tests and ``--overwrite``)."""
    shutil.rmtree(path, ignore_errors=True)
