"""Typed graphs: node types, canonical edge types and one global id space
(docs/format.md#typed-graphs-format_version-2).

The nodes of type ``t`` are ids ``offset[t] .. offset[t] + count[t] - 1``, types in declaration
order (DistDGL's per-type ``node_map`` ranges, fixed before partitioning); the edge list stays
one ``(E, 2)`` file of global ids and a parallel file gives each edge its relation.
:class:`HeteroSchema` holds the types and answers the id arithmetic: a global id's type
(:meth:`HeteroSchema.type_of`, one ``searchsorted`` over the offsets), local <-> global ids,
the relation index of a canonical edge type, and the reverse relations that DGL's
``dgl.add_reverse_edges`` and PyG's ``ToUndirected`` add.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shoal.errors import ShoalInputError

__all__ = ["REVERSE_PREFIX", "EdgeType", "HeteroSchema", "NodeType", "relation_dtype"]

#: the prefix of a reverse relation's name (``writes`` -> ``rev_writes``), as DGL and PyG
REVERSE_PREFIX = "rev_"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def relation_dtype(num_relations: int) -> np.dtype:
    """The dtype of the per-edge relation file: uint8 up to 256 relations, else uint16."""
    if num_relations > 1 << 16:
        raise ShoalInputError(
            f"{num_relations} relations: at most 65536 are supported",
            fix="merge relations, or split the graph",
        )
    return np.dtype(np.uint8 if num_relations <= 1 << 8 else np.uint16)


def _check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ShoalInputError(
            f"{kind} name {name!r} is not a plain name",
            fix="use letters, digits, '_', '.' and '-' (it names files in the graph directory)",
        )
    return name


@dataclass(frozen=True)
class NodeType:
    """One node type: its name, node count, first global id, and the width and dtype of its
    features (``feature_dim`` None: the type has none; models learn an embedding)."""

    name: str
    count: int
    offset: int = 0
    feature_dim: int | None = None
    feature_dtype: str | None = None

    def to_meta(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "count": int(self.count),
            "offset": int(self.offset),
            "feature_dim": self.feature_dim,
            "feature_dtype": self.feature_dtype,
        }


@dataclass(frozen=True)
class EdgeType:
    """A canonical edge type ``(src, relation, dst)``: edges of ``relation`` go from nodes of
    type ``src`` to nodes of type ``dst`` (a message path ``src -> dst``, as for every edge);
    ``count`` its stored edges (known once written)."""

    src: str
    relation: str
    dst: str
    count: int = 0

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.src, self.relation, self.dst)

    def reverse(self) -> EdgeType:
        """The reverse relation ``(dst, rev_<relation>, src)`` (``rev_rev_x`` is ``x``)."""
        rel = self.relation
        rev = rel[len(REVERSE_PREFIX) :] if rel.startswith(REVERSE_PREFIX) else REVERSE_PREFIX + rel
        return EdgeType(self.dst, rev, self.src, self.count)

    def __str__(self) -> str:
        return f"{self.src}__{self.relation}__{self.dst}"

    def to_meta(self) -> dict[str, Any]:
        return {"src": self.src, "relation": self.relation, "dst": self.dst, "count": self.count}


@dataclass
class HeteroSchema:
    """Node types (in id order) and canonical edge types (in relation-index order) of a typed
    graph; ``target`` the node type that carries labels and splits (None: none does).

    Build it with :meth:`of` from counts, or :meth:`from_meta` from a graph directory's
    ``meta.json``. Invariants (checked): unique type names, counts >= 0, offsets the running
    sum of the counts, edge types naming declared node types, unique canonical edge types."""

    node_types: list[NodeType]
    edge_types: list[EdgeType] = field(default_factory=list)
    target: str | None = None

    def __post_init__(self) -> None:
        names = [_check_name("node type", t.name) for t in self.node_types]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ShoalInputError(f"node type {dup!r} is declared twice", fix="name each once")
        at = 0
        for t in self.node_types:
            if int(t.count) < 0:
                raise ShoalInputError(f"node type {t.name!r}: count {t.count} is negative")
            if int(t.offset) != at:
                raise ShoalInputError(
                    f"node type {t.name!r}: offset {t.offset}, expected {at} (types take "
                    "consecutive id ranges in declaration order)"
                )
            at += int(t.count)
        seen = set()
        for e in self.edge_types:
            _check_name("relation", e.relation)
            for end in (e.src, e.dst):
                if end not in names:
                    raise ShoalInputError(
                        f"edge type ({e.src}, {e.relation}, {e.dst}) names node type {end!r}, "
                        "which is not declared",
                        fix=f"declare it among the node types ({', '.join(names)}) or fix the "
                        "relation",
                    )
            if e.key in seen:
                raise ShoalInputError(f"edge type {e.key} is declared twice")
            seen.add(e.key)
        relation_dtype(len(self.edge_types))
        if self.target is not None and self.target not in names:
            raise ShoalInputError(
                f"target node type {self.target!r} is not declared",
                fix=f"choose one of {', '.join(names)}",
            )

    # ------------------------------------------------------------------ building
    @classmethod
    def of(
        cls,
        counts: dict[str, int] | Sequence[tuple[str, int]],
        edge_types: Iterable[tuple[str, str, str]] = (),
        *,
        feature_dims: dict[str, int | None] | None = None,
        target: str | None = None,
    ) -> HeteroSchema:
        """A schema from node counts (in id order) and canonical edge types."""
        items = list(counts.items()) if isinstance(counts, dict) else list(counts)
        dims = feature_dims or {}
        types, at = [], 0
        for name, n in items:
            d = dims.get(name)
            types.append(NodeType(name, int(n), at, d, "float32" if d else None))
            at += int(n)
        return cls(types, [EdgeType(*k) for k in edge_types], target)

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> HeteroSchema | None:
        """The schema of a graph directory's ``meta.json`` (None: an untyped graph)."""
        nts = meta.get("node_types")
        if not nts:
            return None
        try:
            types = [
                NodeType(
                    str(t["name"]),
                    int(t["count"]),
                    int(t["offset"]),
                    t.get("feature_dim"),
                    t.get("feature_dtype"),
                )
                for t in nts
            ]
            ets = [
                EdgeType(str(e["src"]), str(e["relation"]), str(e["dst"]), int(e.get("count", 0)))
                for e in meta.get("edge_types") or []
            ]
        except (KeyError, TypeError, ValueError) as err:
            raise ShoalInputError(
                f"meta.json: a node or edge type entry is malformed ({err!r})",
                fix="rewrite the graph directory with `shoal data import` or `shoal data synth`",
            ) from err
        return cls(types, ets, meta.get("target_type"))

    def to_meta(self) -> dict[str, Any]:
        """The ``meta.json`` fields of the schema."""
        return {
            "node_types": [t.to_meta() for t in self.node_types],
            "edge_types": [e.to_meta() for e in self.edge_types],
            "target_type": self.target,
        }

    # ------------------------------------------------------------------ lookups
    @property
    def num_nodes(self) -> int:
        return sum(int(t.count) for t in self.node_types)

    @property
    def offsets(self) -> np.ndarray:
        """``(T + 1,)`` int64: type ``i``'s ids are ``offsets[i] .. offsets[i + 1] - 1``."""
        return np.array([t.offset for t in self.node_types] + [self.num_nodes], np.int64)

    @property
    def type_names(self) -> list[str]:
        return [t.name for t in self.node_types]

    def node_type(self, name: str) -> NodeType:
        for t in self.node_types:
            if t.name == name:
                return t
        raise ShoalInputError(
            f"no node type {name!r}", fix=f"choose one of {', '.join(self.type_names)}"
        )

    def type_index(self, name: str) -> int:
        return self.type_names.index(self.node_type(name).name)

    def type_of(self, ids: np.ndarray) -> np.ndarray:
        """The type index of each global id (int64 array)."""
        return np.searchsorted(self.offsets, np.asarray(ids, np.int64), side="right") - 1

    def to_global(self, name: str, local: np.ndarray) -> np.ndarray:
        """Global ids of the nodes ``local`` (ids within type ``name``)."""
        return np.asarray(local, np.int64) + self.node_type(name).offset

    def relation_index(self, key: tuple[str, str, str] | str) -> int:
        """The index of a canonical edge type (a triple, or a relation name that is unique)."""
        if isinstance(key, str):
            hits = [i for i, e in enumerate(self.edge_types) if e.relation == key]
            if len(hits) == 1:
                return hits[0]
            what = "names several edge types" if hits else "is not a relation of this graph"
        else:
            key = tuple(key)
            for i, e in enumerate(self.edge_types):
                if e.key == key:
                    return i
            what = "is not an edge type of this graph"
        known = ", ".join(str(e.key) for e in self.edge_types)
        raise ShoalInputError(f"{key!r} {what}", fix=f"choose one of {known}")

    def with_reverse(self, *, merge_same_type: bool = True) -> HeteroSchema:
        """This schema with the reverse of every edge type that has none yet, appended in
        order: ``(dst, rev_<relation>, src)``. A relation within one node type (paper cites
        paper) is, by default (``merge_same_type``), made symmetric instead: its reverse rows
        go into the relation itself, which keeps its name (PyG's ``ToUndirected()``; the
        MLPerf GNN reference's IGBH graph, which adds ``rev_`` relations for the others).
        With ``merge_same_type=False`` it gets a ``rev_`` relation too (DGL's
        ``add_reverse_edges`` on a heterograph with ``copy_edata``)."""
        keys = {e.key for e in self.edge_types}
        out = list(self.edge_types)
        for e in self.edge_types:
            if e.src == e.dst and merge_same_type:
                continue
            r = e.reverse()
            if r.key not in keys:
                out.append(EdgeType(r.src, r.relation, r.dst))
                keys.add(r.key)
        return HeteroSchema(list(self.node_types), out, self.target)

    def pair_relations(self) -> np.ndarray:
        """``(T, T)`` int64: the relation from source type ``i`` to destination type ``j``,
        -1 where none. Typed sampling reads a relation from its endpoints' types, so two
        relations between one ordered type pair (a multi-relational graph with one node
        type) are refused here, naming them."""
        names = self.type_names
        table = np.full((len(names), len(names)), -1, np.int64)
        for r, e in enumerate(self.edge_types):
            i, j = names.index(e.src), names.index(e.dst)
            if table[i, j] >= 0:
                other = self.edge_types[int(table[i, j])].relation
                raise ShoalInputError(
                    f"two relations from {e.src!r} to {e.dst!r} ({other!r}, {e.relation!r}): "
                    "typed sampling tells relations apart by their endpoints' types",
                    fix="give the relations distinct node types, or merge them",
                )
            table[i, j] = r
        return table

    def reverse_index(self) -> np.ndarray:
        """``(R,)`` int64: the index of each relation's reverse, or -1 when it has none."""
        at = {e.key: i for i, e in enumerate(self.edge_types)}
        return np.array([at.get(e.reverse().key, -1) for e in self.edge_types], np.int64)
