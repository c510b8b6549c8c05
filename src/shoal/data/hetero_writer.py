"""Writing a typed graph directory: :class:`HeteroGraphWriter` (``docs/format.md``).

A :class:`~shoal.data.writer.GraphWriter` whose edges come relation by relation, in ids local
to their node types, and whose node data come per type. It writes what any graph directory
has (``edges.bin`` of global ids, ``labels.npy`` and the splits over global ids) and beside it
``edge_types.bin``, the relation of each edge row, and ``features/<type>.npy`` per node type;
``meta.json`` gets ``format_version`` 2 and the schema (:mod:`shoal.data.hetero`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from shoal.data import nodedata
from shoal.data.hetero import EdgeType, HeteroSchema, NodeType, relation_dtype
from shoal.data.layout import RELATION_FILE, TYPED_FORMAT_VERSION, type_feature_file
from shoal.data.writer import GraphWriter
from shoal.errors import ShoalInputError

__all__ = ["HeteroGraphWriter"]


class HeteroGraphWriter(GraphWriter):
    """Write a typed graph directory; atomic, as :class:`GraphWriter` (an example:
    docs/format.md#typed-graphs-format_version-2; ``add_relation`` takes ids local to each
    type, ``write_labels`` and ``write_split`` the target type's).

    Args:
        out: the graph directory to create.
        schema: node types (in id order) and canonical edge types; ``schema.target`` is the
            type whose labels and splits are written (default its first node type).
        add_reverse: also store the reverse of every edge (default false): relations between
            two types get a ``rev_<relation>`` relation, relations within one type take their
            reverse rows themselves unless ``merge_same_type`` is false
            (:meth:`HeteroSchema.with_reverse`).
        merge_same_type: see ``add_reverse`` (default true).
        drop_self_loops: drop ``(v, v)`` rows of same-type relations (default false).
        kw: the other :class:`GraphWriter` options (``name``, ``source``, ``overwrite``,
            ``scratch_dir``); ``dedup`` and ``symmetrize`` are not supported for typed
            graphs (use ``add_reverse``).
    """

    def __init__(
        self,
        out: str | os.PathLike,
        schema: HeteroSchema,
        *,
        add_reverse: bool = False,
        merge_same_type: bool = True,
        drop_self_loops: bool = False,
        **kw: Any,
    ) -> None:
        for opt in ("dedup", "symmetrize", "num_nodes", "directed"):
            if kw.get(opt):
                raise ShoalInputError(
                    f"{opt} is not an option of a typed graph's writer",
                    fix="typed graphs take add_reverse (reverse relations) and no dedup yet; "
                    "their node count is the sum of the types' counts",
                )
            kw.pop(opt, None)
        if not schema.edge_types:
            raise ShoalInputError(
                "a typed graph needs at least one edge type",
                fix="declare the relations as (src_type, relation, dst_type)",
            )
        full = schema.with_reverse(merge_same_type=merge_same_type) if add_reverse else schema
        if full.target is None:
            full.target = full.node_types[0].name
        super().__init__(out, num_nodes=full.num_nodes, directed=not add_reverse, **kw)
        self.schema = full
        self.add_reverse = add_reverse
        self.merge_same_type = merge_same_type
        self.drop_loops = drop_self_loops
        self.rel_dtype = relation_dtype(len(full.edge_types))
        self._rel_counts = np.zeros(len(full.edge_types), np.int64)
        self._rel_f = None
        self._reverse = full.reverse_index()
        self.source.setdefault("options", {}).update(
            {"add_reverse": add_reverse, "merge_same_type": merge_same_type}
        )

    def __enter__(self) -> HeteroGraphWriter:
        super().__enter__()
        self._rel_f = open(self.tmp / RELATION_FILE, "wb")
        return self

    def _close_edges(self) -> None:
        super()._close_edges()
        if self._rel_f is not None and not self._rel_f.closed:
            self._rel_f.close()

    # ------------------------------------------------------------------ edges
    def add_edges(self, edges: np.ndarray, *, origin: str = "edges") -> None:
        """Not for typed graphs: every edge has a relation (:meth:`add_relation`)."""
        raise ShoalInputError(
            "a typed graph's edges are added per relation",
            path=origin,
            fix="call add_relation((src_type, relation, dst_type), edges)",
        )

    def add_relation(
        self,
        relation: tuple[str, str, str] | str,
        edges: Any,
        *,
        origin: str | None = None,
        local: bool = True,
    ) -> None:
        """Append a chunk of edges of ``relation`` (a canonical edge type of the schema given,
        or a relation name that is unique): ``(k, 2)`` rows of (src, dst), or ``(2, k)`` (a
        ``(2, 2)`` array is read as two rows), in
        ids local to the source and destination types (``local``, default) or global ids.
        Each id is checked against its type; ``origin`` names the chunk's file and first row
        for messages."""
        i = self.schema.relation_index(relation)
        et = self.schema.edge_types[i]
        origin = origin or str(et.key)
        e = _pairs(edges, origin)
        src_t, dst_t = self.schema.node_type(et.src), self.schema.node_type(et.dst)
        if local:
            _check_local(e[:, 0], src_t, "source", origin)
            _check_local(e[:, 1], dst_t, "destination", origin)
            e = e + np.array([src_t.offset, dst_t.offset], np.int64)
        else:
            _check_global(e[:, 0], src_t, "source", origin)
            _check_global(e[:, 1], dst_t, "destination", origin)
        if self.drop_loops and et.src == et.dst:
            e = e[e[:, 0] != e[:, 1]]
        self._append(e, i, origin)
        if self.add_reverse:  # a same-type relation merged takes its reverse rows itself
            r = i if et.src == et.dst and self.merge_same_type else int(self._reverse[i])
            if r >= 0:
                self._append(np.ascontiguousarray(e[:, ::-1]), r, origin)

    def _append(self, e: np.ndarray, rel: int, origin: str) -> None:
        if not len(e):
            return
        GraphWriter.add_edges(self, e, origin=origin)
        np.full(len(e), rel, self.rel_dtype).tofile(self._rel_f)
        self._rel_counts[rel] += len(e)

    # ------------------------------------------------------------------ node data
    def write_node_features(
        self, node_type: str, x: Any, *, origin: str | None = None, dtype: Any = None
    ) -> None:
        """Write type ``node_type``'s ``(count, F)`` features (rows in the type's local id
        order; an array or an iterable of row blocks, as :meth:`GraphWriter.write_features`)."""
        t = self.schema.node_type(node_type)
        origin = origin or f"features of node type {node_type!r}"
        path = self.tmp / type_feature_file(node_type)
        path.parent.mkdir(exist_ok=True)
        if dtype is not None and str(getattr(dtype, "name", dtype)) == "int8":
            raise ShoalInputError(
                "int8 features of a typed graph are not supported yet",
                path=origin,
                fix="store a typed graph's features as float32, float16 or bfloat16",
            )
        dim, dt = nodedata.write_features(path, x, int(t.count), origin=origin, dtype=dtype)
        at = self.schema.type_index(node_type)
        self.schema.node_types[at] = NodeType(t.name, t.count, t.offset, dim, dt)

    def write_features(self, x: Any, *, origin: str = "features", dtype: Any = None) -> None:
        """The target type's features (:meth:`write_node_features`)."""
        self.write_node_features(self.schema.target, x, origin=origin, dtype=dtype)

    def write_labels(
        self,
        y: Any,
        *,
        origin: str = "labels",
        num_classes: int | None = None,
        node_type: str | None = None,
    ) -> None:
        """Write the labels of ``node_type`` (default the target type; it becomes the target):
        one per node of that type, -1 = unlabelled; stored over global ids, -1 elsewhere."""
        t = self.schema.node_type(node_type or self.schema.target)
        self.schema.target = t.name
        y, self._num_classes = nodedata.check_labels(
            y, int(t.count), origin=origin, num_classes=num_classes
        )
        full = np.full(self.schema.num_nodes, -1, np.int64)
        full[t.offset : t.offset + t.count] = y
        np.save(self.tmp / "labels.npy", full)

    def write_split(
        self, name: str, idx: Any, *, origin: str | None = None, node_type: str | None = None
    ) -> None:
        """Write split ``name`` as ids local to ``node_type`` (default the target type), or a
        boolean mask over that type's nodes."""
        t = self.schema.node_type(node_type or self.schema.target)
        origin = origin or f"{name} split of node type {t.name!r}"
        local = nodedata.check_split(name, idx, int(t.count), origin=origin)
        super().write_split(name, local + t.offset, origin=origin)

    # ------------------------------------------------------------------ finalize
    def _meta(self, n: int, num_edges: int, dtype: np.dtype) -> dict[str, Any]:
        meta = super()._meta(n, num_edges, dtype)
        self.schema.edge_types = [
            EdgeType(e.src, e.relation, e.dst, int(c))
            for e, c in zip(self.schema.edge_types, self._rel_counts, strict=True)
        ]
        meta["format_version"] = TYPED_FORMAT_VERSION
        meta["relation_file"] = RELATION_FILE
        meta["relation_dtype"] = self.rel_dtype.name
        target = self.schema.node_type(self.schema.target)
        meta["feature_dim"] = target.feature_dim
        meta["feature_dtype"] = target.feature_dtype
        meta.update(self.schema.to_meta())
        return meta

    def _finalize(self) -> None:
        self._close_edges()
        super()._finalize()


def _pairs(edges: Any, origin: str) -> np.ndarray:
    """``(k, 2)`` int64 rows of an edge chunk (``(k, 2)`` or ``(2, k)``), checked integral."""
    e = np.asarray(edges)
    if e.size == 0:
        return np.empty((0, 2), np.int64)
    if e.ndim != 2 or 2 not in e.shape:
        raise ShoalInputError(f"edges must have shape (k, 2) or (2, k), got {e.shape}", path=origin)
    if e.shape[1] != 2:
        e = e.T
    if not np.issubdtype(e.dtype, np.integer):
        if np.issubdtype(e.dtype, np.floating) and np.all(np.mod(e, 1) == 0):
            return e.astype(np.int64)
        raise ShoalInputError(
            f"node ids must be integers, got dtype {e.dtype}",
            path=origin,
            fix="store node ids as integers",
        )
    return e.astype(np.int64)


def _check_local(ids: np.ndarray, t: NodeType, end: str, origin: str) -> None:
    bad = np.flatnonzero((ids < 0) | (ids >= t.count))
    if bad.size:
        r = int(bad[0])
        raise ShoalInputError(
            f"row {r}: {end} id {int(ids[r])} is out of range for node type {t.name!r} "
            f"({t.count} nodes)",
            path=origin,
            fix=f"ids of node type {t.name!r} are 0..{t.count - 1}; check the relation's types "
            "and the node counts",
        )


def _check_global(ids: np.ndarray, t: NodeType, end: str, origin: str) -> None:
    bad = np.flatnonzero((ids < t.offset) | (ids >= t.offset + t.count))
    if bad.size:
        r = int(bad[0])
        raise ShoalInputError(
            f"row {r}: {end} id {int(ids[r])} is not a node of type {t.name!r} (global ids "
            f"{t.offset}..{t.offset + t.count - 1})",
            path=origin,
            fix="pass ids local to their type (local=True), or fix the relation's types",
        )
