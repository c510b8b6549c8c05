"""Reader API of the partitioned store: what the engines and the sampler use
(docs/store.md#reader-api-shoalstore).

The store speaks **new** (global, relabelled) IDs; a part's **local** indices number its core
nodes first, then its halo nodes; **original** IDs are reached through :meth:`Store.to_orig` /
:meth:`Store.to_new` or ``Partition.orig_ids`` (docs/store.md#id-spaces). Every array is
opened with ``np.load(mmap_mode="r")``: nothing is read until used.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from shoal.data.hetero import HeteroSchema
from shoal.errors import ShoalInputError
from shoal.store.format import (
    STORE_FIX,
    STORE_FORMAT,
    STORE_FORMAT_VERSION,
    STORE_TYPED_FORMAT_VERSION,
)
from shoal.utils.featdtype import feature_dtype
from shoal.utils.io import read_meta

__all__ = ["Partition", "Store"]


def _load(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r")
    except FileNotFoundError:
        raise ShoalInputError(
            "store file is missing", path=path, fix="rebuild the store with `shoal store build`"
        ) from None
    except ValueError as e:
        if "mmap length is greater than file size" in str(e) or "cannot mmap an empty" in str(e):
            raise ShoalInputError(
                f"store file is truncated ({e})",
                path=path,
                fix="rebuild the store with `shoal store build`",
            ) from None
        # zero-length arrays cannot be memory-mapped: read them
        try:
            return np.load(path)
        except Exception as e2:  # noqa: BLE001
            raise ShoalInputError(
                f"store file is unreadable ({e2})",
                path=path,
                fix="rebuild the store with `shoal store build`",
            ) from None


def _array(name: str, optional: bool = False) -> cached_property:
    """A part's array file ``name``, memory-mapped on first use (None when ``optional`` and
    absent)."""

    def load(part: Partition) -> np.ndarray | None:
        return part._opt(name) if optional else _load(part.path / name)

    return cached_property(load)


class Partition:
    """One part of a store: the arrays of its folder (shapes and dtypes: docs/store.md#layout)
    as read-only memory maps, ``None`` when absent (``features``, ``halo_features``,
    ``labels``). ``start, stop``: its core nodes' new-ID range; local indices run over its
    ``num_core`` core then ``num_halo`` halo nodes.
    """

    def __init__(self, store: Store, index: int) -> None:
        self.store = store
        self.index = int(index)
        self.path = store.path / f"part_{index}"
        self.start = int(store.part_offsets[index])
        self.stop = int(store.part_offsets[index + 1])
        info = store.meta["parts"][index]
        self.num_core = self.stop - self.start
        self.num_halo = int(info["num_halo"])
        self.num_edges = int(info["num_edges"])

    def _opt(self, name: str) -> np.ndarray | None:
        p = self.path / name
        return _load(p) if p.exists() else None

    indptr = _array("indptr.npy")
    indices = _array("indices.npy")
    halo_ids = _array("halo_ids.npy")
    orig_ids = _array("orig_ids.npy")
    features = _array("features.npy", optional=True)
    halo_features = _array("halo_features.npy", optional=True)
    labels = _array("labels.npy", optional=True)
    train_mask = _array("train_mask.npy")
    val_mask = _array("val_mask.npy")
    test_mask = _array("test_mask.npy")

    @property
    def num_nodes(self) -> int:
        """Core plus halo nodes (the local index space)."""
        return self.num_core + self.num_halo

    @property
    def core_ids(self) -> np.ndarray:
        """New IDs of the core nodes (``arange(start, stop)``)."""
        return np.arange(self.start, self.stop, dtype=np.int64)

    def mask(self, split: str) -> np.ndarray:
        """The bool ``(num_core,)`` mask of split ``train``/``val``/``test``."""
        if split not in ("train", "val", "test"):
            raise ValueError(f"split must be train, val or test, got {split!r}")
        return getattr(self, f"{split}_mask")

    def global_to_local(self, ids: Any) -> np.ndarray:
        """Local indices of new global ``ids``; -1 where a node is neither core nor halo here."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.full(ids.shape, -1, dtype=np.int64)
        core = (ids >= self.start) & (ids < self.stop)
        out[core] = ids[core] - self.start
        rest = ~core
        if self.num_halo and rest.any():
            halo = self.halo_ids
            r = ids[rest]
            pos = np.searchsorted(halo, r)
            hit = pos < self.num_halo
            hit[hit] = np.asarray(halo)[pos[hit]] == r[hit]
            vals = np.where(hit, self.num_core + pos, -1)
            out[rest] = vals
        return out

    def local_to_global(self, local: Any) -> np.ndarray:
        """New global IDs of local indices (core first, then halo)."""
        local = np.asarray(local, dtype=np.int64)
        if local.size and (local.min() < 0 or local.max() >= self.num_nodes):
            raise IndexError(f"local index out of range [0, {self.num_nodes}) in part {self.index}")
        out = local + self.start
        h = local >= self.num_core
        if h.any():
            out[h] = np.asarray(self.halo_ids)[local[h] - self.num_core]
        return out

    # ------------------------------------------------------------------ typed stores
    @cached_property
    def edge_types(self) -> np.ndarray | None:
        """A typed store's relation of each in-edge (aligned with :attr:`indices`; each row
        grouped by relation, in relation order), or None."""
        return self._opt("edge_types.npy") if self.store.schema is not None else None

    @property
    def type_bounds(self) -> np.ndarray:
        """A typed store's ``(T + 1,)`` core rows of each node type: type ``t`` is local rows
        ``[type_bounds[t], type_bounds[t + 1])`` (new ids ``start + ...``)."""
        return self.store.type_bounds[self.index] - self.start

    def type_features(self, node_type: str) -> np.ndarray | None:
        """A typed store's core rows of ``node_type`` (local row ``type_bounds[t] + k`` is row
        ``k``), or None when the type has no features."""
        self.store.schema_or_raise().node_type(node_type)
        return self._opt(f"features/{node_type}.npy")

    def halo_type_features(self, node_type: str) -> np.ndarray | None:
        """A typed store's halo rows of ``node_type``, in halo order (stores built with
        ``--halo-features``), or None."""
        self.store.schema_or_raise().node_type(node_type)
        return self._opt(f"halo_features/{node_type}.npy")

    def in_neighbors(self, row: int) -> np.ndarray:
        """Local in-neighbour indices of core row ``row``."""
        return np.asarray(self.indices[self.indptr[row] : self.indptr[row + 1]])

    def __repr__(self) -> str:
        return (
            f"Partition({self.index}, core=[{self.start}, {self.stop}), halo={self.num_halo}, "
            f"edges={self.num_edges})"
        )


class Store:
    """A partitioned store opened for reading (see the module docstring)."""

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        self.path = path
        self.meta = meta
        self.part_offsets = np.asarray(meta["part_offsets"], dtype=np.int64)
        self._parts: dict[int, Partition] = {}

    @classmethod
    def open(cls, path: str | os.PathLike) -> Store:
        """Open a store directory (reads ``meta.json`` only)."""
        path = Path(path)
        if not path.is_dir():  # the message callers know for a path that holds no store
            raise ShoalInputError(
                "not a store directory: meta.json is missing", path=path, fix=STORE_FIX
            )
        meta = read_meta(
            path,
            kind=STORE_FORMAT,
            version=(STORE_FORMAT_VERSION, STORE_TYPED_FORMAT_VERSION),
            what="a store directory",
            fix=STORE_FIX,
        )
        meta_path = path / "meta.json"
        try:
            store = cls(path, meta)
            ok = store.part_offsets.shape == (store.num_parts + 1,)
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise ShoalInputError(
                "meta.json: part_offsets/num_parts are missing or inconsistent",
                path=meta_path,
                fix="rebuild the store with `shoal store build`",
            )
        return store

    # ------------------------------------------------------------------ properties
    @property
    def num_parts(self) -> int:
        return int(self.meta["num_parts"])

    @property
    def num_nodes(self) -> int:
        return int(self.meta["num_nodes"])

    @property
    def num_edges(self) -> int:
        return int(self.meta["num_edges"])

    @property
    def feature_dim(self) -> int | None:
        """Columns of a node's input row: the features' width; a typed store's widest node
        type's (every type's rows padded to it, :class:`~shoal.rows.typed.TypedRows`; None
        when no type has features)."""
        dim = self.meta.get("feature_dim")
        if dim is None and self.meta.get("schema"):
            return max(self.type_feature_dims.values(), default=None)
        return dim

    @property
    def num_classes(self) -> int | None:
        return self.meta.get("num_classes")

    @property
    def halo_features(self) -> bool:
        """Whether parts carry their halo nodes' feature rows."""
        return bool(self.meta.get("halo_features"))

    # ------------------------------------------------------------------ typed stores
    @cached_property
    def schema(self) -> HeteroSchema | None:
        """A typed store's node types and relations (the graph's), or None."""
        sm = self.meta.get("schema")
        return HeteroSchema.from_meta(sm) if sm else None

    def schema_or_raise(self) -> HeteroSchema:
        if self.schema is None:
            raise ShoalInputError(
                "the store is untyped: it has no node types",
                path=self.path,
                fix="build the store from a typed graph",
            )
        return self.schema

    @cached_property
    def type_bounds(self) -> np.ndarray:
        """``(p, T + 1)`` int64: part ``i``'s nodes of type ``t`` are the new ids
        ``[type_bounds[i, t], type_bounds[i, t + 1])``."""
        self.schema_or_raise()
        return np.asarray(self.meta["type_bounds"], dtype=np.int64)

    def type_of(self, ids: Any) -> np.ndarray:
        """The node type index of new global ``ids`` (one binary search over the ``p * T``
        range starts; an empty range is skipped by ``side="right"``)."""
        b = self.type_bounds
        t = b.shape[1] - 1
        pos = np.searchsorted(b[:, :t].ravel(), np.asarray(ids, np.int64), side="right") - 1
        return pos % t

    @property
    def type_feature_dims(self) -> dict[str, int]:
        """A typed store's feature width of each node type that has features."""
        return {k: int(v) for k, v in (self.meta.get("type_feature_dims") or {}).items()}

    def part(self, i: int) -> Partition:
        """Part ``i`` (cached)."""
        i = int(i)
        if not 0 <= i < self.num_parts:
            raise IndexError(f"part {i} out of range [0, {self.num_parts})")
        if i not in self._parts:
            self._parts[i] = Partition(self, i)
        return self._parts[i]

    def parts(self) -> list[Partition]:
        return [self.part(i) for i in range(self.num_parts)]

    # ------------------------------------------------------------------ id maps
    @cached_property
    def node_map(self) -> np.ndarray:
        """int64 (N,) original ID -> new ID (memory map)."""
        return _load(self.path / "node_map.npy")

    @cached_property
    def node_map_inv(self) -> np.ndarray:
        """int64 (N,) new ID -> original ID (memory map)."""
        return _load(self.path / "node_map_inv.npy")

    def to_new(self, orig_ids: Any) -> np.ndarray:
        return np.asarray(self.node_map[np.asarray(orig_ids, dtype=np.int64)])

    def to_orig(self, new_ids: Any) -> np.ndarray:
        return np.asarray(self.node_map_inv[np.asarray(new_ids, dtype=np.int64)])

    def owner(self, ids: Any) -> np.ndarray:
        """Owner part of new global ``ids`` by binary search over ``part_offsets``."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_nodes):
            raise IndexError(f"node id out of range [0, {self.num_nodes})")
        return np.searchsorted(self.part_offsets, ids, side="right") - 1

    def link_edges(self, name: str) -> np.ndarray | None:
        """Held-out positive edges ``val``/``test`` of a link split, in new ids, as a
        ``(k, 2)`` int64 memory map; None when the store was built from an unsplit graph."""
        if name not in ("val", "test"):
            raise ValueError(f"link split must be 'val' or 'test', got {name!r}")
        path = self.path / f"link_{name}.npy"
        return _load(path) if path.exists() else None

    def link_negatives(self, name: str) -> np.ndarray | None:
        """A typed link split's fixed evaluation negatives of ``val``/``test`` (``(k, K)``
        destinations in new ids, a memory map); None when the split draws its own."""
        path = self.path / f"link_{name}_neg.npy"
        return _load(path) if path.exists() else None

    @property
    def link_split(self) -> dict[str, Any]:
        """The ``link_split`` meta of the graph the store was built from (``shoal data
        split-edges``: a typed split's target relation and negatives); empty without."""
        return dict(self.meta.get("link_split") or {})

    # ------------------------------------------------------------------ node data
    def features(self, ids: Any, out: np.ndarray | None = None) -> np.ndarray:
        """Feature rows of new global ``ids`` (core nodes of any part), gathered from the
        owners' memory-mapped files into ``out`` (allocated when None), as stored
        (:mod:`shoal.utils.featdtype`: ``uint16`` bfloat16 bits, int8 without its scales)."""
        if self.feature_dim is None:
            raise ShoalInputError("the store has no features", path=self.path)
        ids = np.asarray(ids, dtype=np.int64)
        if out is None:
            out = np.empty(
                (ids.shape[0], self.feature_dim),
                dtype=feature_dtype(self.meta["feature_dtype"]).stored,
            )
        elif out.shape[0] < ids.shape[0] or out.shape[1:] != (self.feature_dim,):
            raise ValueError(
                f"out has shape {out.shape}, need ({ids.shape[0]}, {self.feature_dim})"
            )
        owner = self.owner(ids)
        for i in np.unique(owner):
            sel = np.flatnonzero(owner == i)
            part = self.part(int(i))
            out[sel] = part.features[ids[sel] - part.start]
        return out[: ids.shape[0]]

    def labels(self, ids: Any) -> np.ndarray:
        """Labels of new global ``ids`` (-1 = unlabelled)."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.full(ids.shape, -1, dtype=np.int64)
        owner = self.owner(ids)
        for i in np.unique(owner):
            sel = np.flatnonzero(owner == i)
            part = self.part(int(i))
            if part.labels is not None:
                out[sel] = part.labels[ids[sel] - part.start]
        return out

    # ------------------------------------------------------------------ edge buckets
    @property
    def bucket_counts(self) -> np.ndarray:
        """int64 (p, p): number of edges with owner(src) = row, owner(dst) = column."""
        return np.asarray(self.meta["buckets"]["counts"], dtype=np.int64).reshape(
            self.num_parts, self.num_parts
        )

    def bucket_path(self, src_part: int, dst_part: int) -> Path:
        return self.path / "buckets" / f"edges_{int(src_part)}_{int(dst_part)}.bin"

    def bucket(self, src_part: int, dst_part: int) -> np.ndarray:
        """Edges ``(k, 2)`` (new src, new dst) of bucket ``(src_part, dst_part)`` (memory map)."""
        k = int(self.bucket_counts[src_part, dst_part])
        dtype = np.dtype(self.meta["edge_dtype"])
        if k == 0:
            return np.empty((0, 2), dtype=dtype)
        return np.memmap(self.bucket_path(src_part, dst_part), dtype=dtype, mode="r", shape=(k, 2))

    def bucket_stream(self, src_part: int, dst_part: int, chunk_edges: int = 1 << 20):
        """An :class:`~shoal.data.stream.EdgeStream` over one bucket (bounded memory)."""
        from shoal.data.stream import EdgeStream

        return EdgeStream(
            self.bucket_path(src_part, dst_part),
            int(self.bucket_counts[src_part, dst_part]),
            self.meta["edge_dtype"],
            chunk_edges,
        )

    def __repr__(self) -> str:
        return (
            f"Store({str(self.path)!r}, num_parts={self.num_parts}, num_nodes={self.num_nodes}, "
            f"num_edges={self.num_edges})"
        )
