"""``shoal verify`` of a typed store (private): types, relations and per-type features.

Adds to :func:`shoal.store.verify.verify_store`, for a store of a typed graph:

- every part's type ranges tile its core range, and the nodes in type ``t``'s range are of
  type ``t`` in the source schema;
- ``edge_types`` has one relation per in-edge, each row grouped by relation in ascending
  order, and every edge's relation joins its endpoints' types;
- against the source graph: each core node's in-edge multiset *with relations* equals the
  source's (the multiset hash of ``(src * R + relation, dst)``), and every type's core and halo
  feature rows equal the source rows.

Memory: O(V) arrays plus one chunk of edges or rows at a time.
"""

from __future__ import annotations

import numpy as np

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.store._io import gather_rows, read_rows
from shoal.store._kernels import _edge_hash_accumulate
from shoal.store.reader import Partition, Store

__all__ = ["check_typed"]

_FIX = "the store is corrupt; rebuild it with `shoal store build`"


def _fail(msg: str, path: object) -> None:
    raise ShoalInputError(msg, path=path, fix=_FIX)


def _check_types(store: Store, inv: np.ndarray) -> None:
    """Type ranges tile each part, and hold nodes of their type."""
    schema, b = store.schema, store.type_bounds
    t = len(schema.node_types)
    meta = store.path / "meta.json"
    if b.shape != (store.num_parts, t + 1):
        _fail(f"type_bounds has shape {b.shape}, expected ({store.num_parts}, {t + 1})", meta)
    if not (
        np.array_equal(b[:, 0], store.part_offsets[:-1])
        and np.array_equal(b[:, -1], store.part_offsets[1:])
        and np.all(np.diff(b, axis=1) >= 0)
    ):
        _fail("type_bounds do not tile the parts' core ranges", meta)
    for i in range(store.num_parts):
        for k in range(t):
            orig = inv[b[i, k] : b[i, k + 1]]
            if orig.size and np.any(schema.type_of(orig) != k):
                _fail(
                    f"part {i}: a node in the range of type {schema.node_types[k].name!r} is "
                    "of another type in the source schema",
                    meta,
                )


def _part_hash(store: Store, part: Partition, acc: np.ndarray, chunk_edges: int) -> None:
    """Relations of part ``part``'s in-edges checked; their ``(src * R + rel, dst)`` hashes
    added to ``acc``."""
    schema = store.schema
    names = schema.type_names
    r = len(schema.edge_types)
    rsrc = np.array([names.index(e.src) for e in schema.edge_types], np.int64)
    rdst = np.array([names.index(e.dst) for e in schema.edge_types], np.int64)
    path = part.path / "edge_types.npy"
    et_all = part.edge_types
    if et_all is None or et_all.shape != (part.num_edges,):
        _fail(f"part {part.index}: edge_types is missing or not one per in-edge", path)
    indptr = np.asarray(part.indptr)
    row_start = np.zeros(part.num_edges + 1, bool)
    row_start[indptr[:-1][np.diff(indptr) > 0]] = True
    halo = np.asarray(part.halo_ids, np.int64)
    for s in range(0, part.num_edges, chunk_edges):
        et = read_rows(path, s, s + chunk_edges).astype(np.int64)
        loc = read_rows(part.path / "indices.npy", s, s + chunk_edges).astype(np.int64)
        pos = np.arange(s, s + et.shape[0])
        if et.size and (et.min() < 0 or et.max() >= r):
            _fail(f"part {part.index}: a relation id out of range [0, {r})", path)
        if s > 0:  # the previous chunk's last relation, for the order check
            et_prev = np.concatenate([read_rows(path, s - 1, s).astype(np.int64), et])
        else:
            et_prev = np.concatenate([[-1], et])
        drop = (np.diff(et_prev) < 0) & ~row_start[pos]
        if drop.any():
            _fail(
                f"part {part.index}: in-edge {int(pos[drop][0])} breaks its row's relation order",
                path,
            )
        dst = np.searchsorted(indptr, pos, side="right") - 1 + part.start
        nc = part.num_core
        src = np.where(
            loc < nc, loc + part.start, halo[np.maximum(loc - nc, 0)] if len(halo) else 0
        )
        bad = (store.type_of(src) != rsrc[et]) | (store.type_of(dst) != rdst[et])
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            _fail(
                f"part {part.index}: in-edge {int(pos[k])} has relation "
                f"{schema.edge_types[int(et[k])]}, which does not join its endpoints' types",
                path,
            )
        _edge_hash_accumulate(src * r + et, dst, acc)


def _check_features(store: Store, g: GraphDir, inv: np.ndarray) -> None:
    """Every type's core (and halo) feature rows equal the source rows."""
    block = 1 << 14
    for t, nt in enumerate(store.schema.node_types):
        x = g.node_features(nt.name)
        if x is None:
            continue
        src = g.path / "features" / f"{nt.name}.npy"
        for part in store.parts():
            lo, hi = (int(v) for v in store.type_bounds[part.index, t : t + 2])
            f = part.path / "features" / f"{nt.name}.npy"
            if not f.exists():
                _fail(f"part {part.index}: features of type {nt.name!r} are missing", f)
            for s in range(lo, hi, block):
                e = min(hi, s + block)
                if (
                    read_rows(f, s - lo, e - lo).tobytes()
                    != gather_rows(src, inv[s:e] - nt.offset).tobytes()
                ):
                    _fail(
                        f"part {part.index}: {nt.name} feature rows {s - lo}..{e - lo - 1} "
                        "differ from the source rows",
                        f,
                    )
            if store.halo_features:
                h = np.asarray(part.halo_ids, np.int64)
                h = h[store.type_of(h) == t]
                hf = part.path / "halo_features" / f"{nt.name}.npy"
                if not hf.exists() or gather_rows(src, inv[h] - nt.offset).tobytes() != (
                    read_rows(hf, 0, len(h)).tobytes()
                ):
                    _fail(
                        f"part {part.index}: {nt.name} halo feature rows differ from the "
                        "source rows",
                        hf,
                    )


def check_typed(
    store: Store,
    g: GraphDir | None,
    node_map: np.ndarray,
    inv: np.ndarray,
    checks: list[str],
    *,
    chunk_edges: int,
) -> None:
    """The typed store's checks (module docstring); ``g`` None skips the source comparison."""
    _check_types(store, inv)
    checks.append("node type ranges of every part")
    acc = np.zeros(store.num_nodes, np.uint64)
    for part in store.parts():
        _part_hash(store, part, acc, chunk_edges)
    checks.append("relation of every in-edge: one per edge, grouped per row, joins its types")
    if g is None:
        return
    r = len(store.schema.edge_types)
    ref = np.zeros(store.num_nodes, np.uint64)
    rel = g.relations()
    at = 0
    for chunk in g.edge_stream(chunk_edges):
        k = chunk.shape[0]
        et = np.asarray(rel[at : at + k], np.int64)
        at += k
        _edge_hash_accumulate(node_map[chunk[:, 0]] * r + et, node_map[chunk[:, 1]], ref)
    if not np.array_equal(acc, ref):
        v = int(np.flatnonzero(acc != ref)[0])
        i = int(store.owner([v])[0])
        _fail(
            f"core node {int(inv[v])} (new id {v}) of part {i}: its in-edges' relations differ "
            "from the source graph's",
            store.path / f"part_{i}" / "edge_types.npy",
        )
    checks.append("each core node's in-edges with their relations equal the source graph's")
    _check_features(store, g, inv)
    checks.append("each node type's feature rows (core and halo) equal the source rows")
