"""Reading a graph directory: :class:`GraphDir` (everything memory-mapped, nothing loaded) and
its :class:`CSR` adjacency views (``docs/format.md``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shoal.data.extsort import DEFAULT_SORT_MEMORY, build_csr_files
from shoal.data.hetero import HeteroSchema
from shoal.data.layout import (
    EDGE_FILE,
    FORMAT_NAME,
    FORMAT_VERSIONS,
    RELATION_FILE,
    SPLITS,
    type_feature_file,
)
from shoal.data.stream import DEFAULT_CHUNK_EDGES, EdgeStream
from shoal.errors import ShoalInputError
from shoal.utils.featdtype import FeatureDtype, feature_dtype
from shoal.utils.io import atomic_output_dir, file_checksum, read_meta, write_json_atomic

__all__ = ["CSR", "GraphDir"]


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
        #: node types and relations of a typed graph (``format_version`` 2), else None
        self.schema: HeteroSchema | None = HeteroSchema.from_meta(meta)

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | os.PathLike, *, verify: bool = False) -> GraphDir:
        """Open the graph directory ``path``; ``verify`` also checks every file's checksum.

        Raises ShoalInputError when ``path`` is not a directory, has no ``meta.json``, or its
        ``meta.json`` has another format or format version.
        """
        path = Path(path)
        meta = read_meta(
            path,
            kind=FORMAT_NAME,
            version=FORMAT_VERSIONS,
            what="a graph directory",
            fix="create one with `shoal data import` or `shoal data synth`",
        )
        g = cls(path, meta)
        feature_dtype(meta.get("feature_dtype"), path=path / "meta.json")  # one it can decode
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
    def feature_dtype(self) -> FeatureDtype:
        """The stored features' dtype (:mod:`shoal.utils.featdtype`; float32 when none)."""
        return feature_dtype(self.meta.get("feature_dtype"))

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

    def csr(
        self,
        kind: str = "in",
        *,
        build: bool = True,
        memory_bytes: int | None = None,
        scratch_dir: str | os.PathLike | None = None,
    ) -> CSR:
        """The ``in`` or ``out`` CSR view, memory-mapped; built (and recorded) if missing."""
        if kind not in ("in", "out"):
            raise ValueError(f"kind must be 'in' or 'out', got {kind!r}")
        if not self.has_csr(kind):
            if not build:
                raise ShoalInputError(
                    f"no csr_{kind} view", path=self.path, fix=f"run `shoal data csr {self.path}`"
                )
            self.build_csr(
                kind, memory_bytes=memory_bytes or DEFAULT_SORT_MEMORY, scratch_dir=scratch_dir
            )
        d = self.path / f"csr_{kind}"
        return CSR(
            np.load(d / "indptr.npy", mmap_mode="r"),
            np.load(d / "indices.npy", mmap_mode="r"),
            kind,
        )

    def build_csr(
        self,
        kind: str = "in",
        *,
        memory_bytes: int = DEFAULT_SORT_MEMORY,
        scratch_dir: str | os.PathLike | None = None,
    ) -> None:
        """Build ``csr_<kind>/`` with a bounded-memory external sort and record its checksums.

        The view is written to a temporary sibling folder and renamed into place; meta.json
        is then rewritten atomically with the new files' checksums. The sort's run files go to
        a private folder inside ``scratch_dir`` (default: beside the view, i.e. in the graph
        directory; never the system temp dir), removed when the sort ends.
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
                scratch_dir=scratch_dir,
                beside=final,
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

    def relations(self) -> np.ndarray | None:
        """A typed graph's ``(E,)`` relation index of each edge row (the order of
        :meth:`edge_stream`; a memory map), or None for an untyped graph."""
        if self.schema is None:
            return None
        p = self.path / self.meta.get("relation_file", RELATION_FILE)
        dtype = np.dtype(self.meta.get("relation_dtype", "uint8"))
        if p.stat().st_size != self.num_edges * dtype.itemsize:
            raise ShoalInputError(
                f"{p.name} has {p.stat().st_size} bytes, expected {self.num_edges} edges x "
                f"{dtype.itemsize}",
                path=p,
                fix="the file is truncated or corrupt; write the graph again",
            )
        if self.num_edges == 0:
            return np.empty(0, dtype)
        return np.memmap(p, dtype=dtype, mode="r", shape=(self.num_edges,))

    def node_features(self, node_type: str) -> np.ndarray | None:
        """A typed graph's ``(count, F)`` features of ``node_type`` (a memory map; rows in
        the type's local id order), or None when the type has none."""
        if self.schema is None:
            raise ShoalInputError(
                "an untyped graph has no per-type features", path=self.path, fix="use features()"
            )
        self.schema.node_type(node_type)  # a clear error for an unknown type
        return self._npy(type_feature_file(node_type))

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

    def link_edges(self, name: str) -> np.ndarray | None:
        """Held-out positive edges ``val``/``test`` of a link split (``shoal data
        split-edges``) as a ``(k, 2)`` int64 memory map, or None when the graph has none."""
        if name not in ("val", "test"):
            raise ValueError(f"link split must be 'val' or 'test', got {name!r}")
        return self._npy(f"link_{name}.npy")

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
