"""``shoal verify`` and ``shoal inspect``: check a store's integrity, summarise its parts.

:func:`verify_store` checks four groups in order, stopping at the first failing one
(meta.json's checksum, every file's size and SHA-256, the invariants, the source graph; with
a schema also the type ranges, relations and every type's rows): docs/store.md#verify.
Memory: O(V) arrays plus one chunk of edges or feature rows at a time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from shoal.data.format import SPLITS, GraphDir
from shoal.data.layout import type_feature_file
from shoal.errors import ShoalInputError
from shoal.store._io import gather_rows, meta_checksum, read_rows
from shoal.store._kernels import _edge_hash_accumulate
from shoal.store.reader import Store
from shoal.utils.featdtype import convert_block, feature_dtype, scales_path
from shoal.utils.io import file_checksum
from shoal.utils.progress import progress

__all__ = ["inspect_store", "verify_store"]

_FIX = "the store is corrupt; rebuild it with `shoal store build`"


def _fail(msg: str, path: object) -> None:
    raise ShoalInputError(msg, path=path, fix=_FIX)


def _check_files(path: Path, meta: dict[str, Any], show: bool | None) -> int:
    bad = []
    items = list(meta.get("files", {}).items())
    for name, info in progress(items, total=len(items), desc="verify: checksums", enable=show):
        f = path / name
        if not f.is_file():
            bad.append(f"{name}: missing")
        elif f.stat().st_size != info.get("bytes"):
            bad.append(f"{name}: {f.stat().st_size} bytes, meta.json says {info.get('bytes')}")
        elif file_checksum(f) != info.get("checksum"):
            bad.append(f"{name}: checksum mismatch")
    if bad:
        _fail("corrupt store files: " + "; ".join(bad), path)
    return len(items)


def _check_id_maps(store: Store, checks: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``node_map``/``node_map_inv`` are inverse permutations and ``part_offsets`` partition
    the nodes. Returns (node_map, node_map_inv) in memory."""
    path, n = store.path, store.num_nodes
    offsets = store.part_offsets
    inv = np.asarray(store.node_map_inv, dtype=np.int64)
    node_map = np.asarray(store.node_map, dtype=np.int64)
    if inv.shape != (n,) or node_map.shape != (n,):
        _fail(
            f"node_map/node_map_inv have shapes {node_map.shape}/{inv.shape}, expected ({n},)",
            path / "node_map.npy",
        )
    if n and (inv.min() < 0 or inv.max() >= n or np.bincount(inv, minlength=n).max() != 1):
        _fail(
            "node_map_inv is not a permutation: some node is owned twice or not at all",
            path / "node_map_inv.npy",
        )
    if n and not np.array_equal(node_map[inv], np.arange(n)):
        _fail("node_map is not the inverse of node_map_inv", path / "node_map.npy")
    if offsets[0] != 0 or offsets[-1] != n or np.any(np.diff(offsets) < 0):
        _fail(
            f"part_offsets {offsets.tolist()} are not a partition of [0, {n})", path / "meta.json"
        )
    if not np.array_equal(np.load(path / "part_offsets.npy"), offsets):
        _fail("part_offsets.npy differs from meta.json", path / "part_offsets.npy")
    checks.append("every node owned exactly once (node_map is a permutation)")
    schema = store.schema
    if schema is not None:
        b, t, meta = store.type_bounds, len(schema.node_types), path / "meta.json"
        if b.shape != (store.num_parts, t + 1):
            _fail(f"type_bounds has shape {b.shape}, expected ({store.num_parts}, {t + 1})", meta)
        if not (
            np.array_equal(b[:, 0], offsets[:-1])
            and np.array_equal(b[:, -1], offsets[1:])
            and np.all(np.diff(b, axis=1) >= 0)
        ):
            _fail("type_bounds do not tile the parts' core ranges", meta)
        bad = np.flatnonzero(schema.type_of(inv) != store.type_of(np.arange(n)))
        if bad.size:
            k = int(store.type_of(bad[:1])[0])
            _fail(
                f"part {int(store.owner(bad[:1])[0])}: a node in the range of type "
                f"{schema.node_types[k].name!r} is of another type in the source schema",
                meta,
            )
        checks.append("node type ranges of every part")
    return node_map, inv


def _check_assignment(store: Store, inv: np.ndarray, checks: list[str], skipped: list[str]) -> None:
    """Core nodes agree with the assignment directory, when it is still there."""
    n, p = store.num_nodes, store.num_parts
    apath = Path(store.meta.get("partition", {}).get("path") or "/nonexistent")
    if not (apath / "node_part.npy").is_file():
        skipped.append(f"assignment {apath} not found: owners not compared with it")
        return
    node_part = np.load(apath / "node_part.npy", mmap_mode="r")
    if node_part.shape == (n,):
        own = np.repeat(np.arange(p), np.diff(store.part_offsets))
        if not np.array_equal(np.asarray(node_part)[inv], own):
            _fail(
                f"core nodes disagree with the assignment {apath}", store.path / "node_map_inv.npy"
            )
        checks.append("core nodes match the assignment")


def _check_part(
    store: Store, i: int, inv: np.ndarray, acc: np.ndarray, acc_rel: np.ndarray, chunk_edges: int
) -> int:
    """Part ``i``'s CSR, halo ids, ``orig_ids`` and relations; adds its in-edges' hashes to
    ``acc`` (and, with a schema, those of ``(src * R + rel, dst)`` to ``acc_rel``). Returns
    its number of in-edges."""
    part = store.part(i)
    pdir, meta_path, n = part.path, store.path / "meta.json", store.num_nodes
    lo, hi, nc = part.start, part.stop, part.num_core
    info = store.meta["parts"][i]
    if info["num_core"] != nc:
        _fail(f"part {i}: num_core {info['num_core']} != part_offsets range {nc}", meta_path)
    indptr = np.asarray(part.indptr)
    if indptr.shape != (nc + 1,) or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
        _fail(f"part {i}: indptr is not a valid CSR row pointer of {nc} rows", pdir / "indptr.npy")
    ne = int(indptr[-1])
    if part.indices.shape != (ne,) or ne != part.num_edges:
        _fail(
            f"part {i}: indices has {part.indices.shape[0]} entries, indptr says {ne}",
            pdir / "indices.npy",
        )
    halo = np.asarray(part.halo_ids, dtype=np.int64)
    nh = halo.shape[0]
    if nh != part.num_halo:
        _fail(f"part {i}: {nh} halo ids, meta.json says {part.num_halo}", pdir / "halo_ids.npy")
    if nh and (np.any(np.diff(halo) <= 0) or halo[0] < 0 or halo[-1] >= n):
        _fail(f"part {i}: halo ids are not sorted unique ids in [0, {n})", pdir / "halo_ids.npy")
    if nh and np.any(store.owner(halo) == i):
        _fail(f"part {i}: a halo node is owned by the part itself", pdir / "halo_ids.npy")
    orig = np.asarray(part.orig_ids)
    if not np.array_equal(orig, np.concatenate([inv[lo:hi], inv[halo]])):
        _fail(f"part {i}: orig_ids disagree with node_map_inv", pdir / "orig_ids.npy")
    et_path, schema = pdir / "edge_types.npy", store.schema
    if schema is not None:
        r = len(schema.edge_types)
        ends = np.array(
            [[schema.type_names.index(x) for x in (e.src, e.dst)] for e in schema.edge_types],
            np.int64,
        ).reshape(r, 2)
        if part.edge_types is None or part.edge_types.shape != (ne,):
            _fail(f"part {i}: edge_types is missing or not one per in-edge", et_path)
        row_start = np.zeros(ne + 1, bool)
        row_start[indptr[:-1][np.diff(indptr) > 0]] = True
    used = np.zeros(nh, dtype=bool)
    for s in range(0, ne, chunk_edges):
        loc = read_rows(pdir / "indices.npy", s, s + chunk_edges).astype(np.int64)
        if loc.size and (loc.min() < 0 or loc.max() >= nc + nh):
            _fail(f"part {i}: local index out of range [0, {nc + nh})", pdir / "indices.npy")
        used[loc[loc >= nc] - nc] = True
        pos = np.arange(s, s + loc.shape[0])
        dst = np.searchsorted(indptr, pos, side="right") - 1 + lo
        src = np.where(loc < nc, loc + lo, halo[np.maximum(loc - nc, 0)] if nh else 0)
        _edge_hash_accumulate(src, dst, acc)
        if schema is not None:
            # in range, ascending within each row, joining the types ends[rel]
            et = read_rows(et_path, s, s + pos.shape[0]).astype(np.int64)
            if et.min() < 0 or et.max() >= r:
                _fail(f"part {i}: a relation id out of range [0, {r})", et_path)
            prev = read_rows(et_path, s - 1, s).astype(np.int64) if s else np.array([-1])
            drop = (np.diff(np.concatenate([prev, et])) < 0) & ~row_start[pos]
            if drop.any():
                _fail(
                    f"part {i}: in-edge {int(pos[drop][0])} breaks its row's relation order",
                    et_path,
                )
            bad = (store.type_of(src) != ends[et, 0]) | (store.type_of(dst) != ends[et, 1])
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                _fail(
                    f"part {i}: in-edge {int(pos[k])} has relation "
                    f"{schema.edge_types[int(et[k])]}, which does not join its endpoints' types",
                    et_path,
                )
            _edge_hash_accumulate(src * r + et, dst, acc_rel)
    if nh and not used.all():
        k = int(np.flatnonzero(~used)[0])
        _fail(
            f"part {i}: halo node {int(halo[k])} is not an in-neighbour of any core node",
            pdir / "halo_ids.npy",
        )
    return ne


def _bucket_hashes(store: Store, chunk_edges: int, checks: list[str]) -> np.ndarray:
    """Owners and counts of the edge buckets; returns their per-node in-edge hashes."""
    n, p, m = store.num_nodes, store.num_parts, store.num_edges
    counts = store.bucket_counts
    if int(counts.sum()) != m:
        _fail(
            f"edge buckets hold {int(counts.sum())} edges, the graph has {m}",
            store.path / "meta.json",
        )
    acc = np.zeros(n, dtype=np.uint64)
    for i in range(p):
        for j in range(p):
            bpath = store.bucket_path(i, j)
            for chunk in store.bucket_stream(i, j, chunk_edges):
                s_ = chunk[:, 0].astype(np.int64)
                d_ = chunk[:, 1].astype(np.int64)
                if s_.min() < 0 or d_.min() < 0 or max(s_.max(), d_.max()) >= n:
                    _fail(f"bucket ({i}, {j}): node id out of range", bpath)
                if np.any(store.owner(s_) != i) or np.any(store.owner(d_) != j):
                    _fail(
                        f"bucket ({i}, {j}): holds an edge whose owners are not ({i}, {j})", bpath
                    )
                _edge_hash_accumulate(s_, d_, acc)
    checks.append("edge buckets: owners and counts")
    return acc


def verify_store(
    path: str | os.PathLike,
    *,
    source: bool = True,
    chunk_edges: int = 1 << 18,
    show_progress: bool | None = None,
) -> dict[str, Any]:
    """Verify the store at ``path``; raise :class:`ShoalInputError` naming the first problem.

    Returns a report: ``{"ok": True, "files": k, "checks": [...], "skipped": [...]}``.
    """
    path = Path(path)
    meta_path = path / "meta.json"
    if not meta_path.is_file():
        _fail("not a store directory: meta.json is missing", path)
    stored, actual = meta_checksum(meta_path.read_bytes())
    if stored is None or stored != actual:
        _fail("meta.json is corrupt: its content does not match its embedded checksum", meta_path)
    store = Store.open(path)
    checks: list[str] = []
    skipped: list[str] = []
    nfiles = _check_files(path, store.meta, show_progress)
    checks.append(f"checksums of {nfiles} files")
    node_map, inv = _check_id_maps(store, checks)
    _check_assignment(store, inv, checks, skipped)

    acc_store, acc_rel = (np.zeros(store.num_nodes, dtype=np.uint64) for _ in range(2))
    p = store.num_parts
    total_edges = sum(
        _check_part(store, i, inv, acc_store, acc_rel, chunk_edges)
        for i in progress(range(p), total=p, desc="verify: parts", enable=show_progress)
    )
    if total_edges != store.num_edges:
        _fail(f"parts hold {total_edges} in-edges, the graph has {store.num_edges}", meta_path)
    checks.append("per-part CSR, halo ids and owners, orig_ids")
    if store.schema is not None:
        checks.append("relation of every in-edge: one per edge, grouped per row, joins its types")
    acc_bucket = _bucket_hashes(store, chunk_edges, checks)

    gpath = Path(store.meta.get("graph", {}).get("path") or "/nonexistent")
    has_source = (gpath / "meta.json").is_file()
    if not source or not has_source:
        if not np.array_equal(acc_bucket, acc_store):
            v = int(np.flatnonzero(acc_bucket != acc_store)[0])
            _fail(
                f"edge buckets and part CSRs disagree on the in-edges of node {int(inv[v])} "
                f"(new id {v}, part {int(store.owner([v])[0])})",
                path / "buckets",
            )
        checks.append("edge buckets hold the same edges as the part CSRs")
    if not source:
        skipped.append("source graph comparison (disabled)")
    elif not has_source:
        skipped.append(f"source graph {gpath} not found: in-edges/features not compared")
    else:  # the parts' and the buckets' in-edges equal the source graph's; then node data
        g, n, m = GraphDir.open(gpath), store.num_nodes, store.num_edges
        gmeta = store.meta.get("graph", {})
        ck = g.meta.get("files", {}).get(g.meta.get("edge_file", "edges.bin"), {}).get("checksum")
        if (
            g.num_nodes != n
            or g.num_edges != m
            or (gmeta.get("edges_checksum") and ck != gmeta.get("edges_checksum"))
            or (g.schema is None) != (store.schema is None)
        ):
            _fail(
                f"the source graph {g.path} changed since the store was built", path / "meta.json"
            )
        acc_src, ref_rel = np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=np.uint64)
        rel, r, at = g.relations(), len(store.schema.edge_types) if store.schema else 1, 0
        stream = g.edge_stream(chunk_edges)
        for chunk in progress(
            stream, total=len(stream), desc="verify: source", enable=show_progress
        ):
            s_, d_ = node_map[chunk[:, 0]], node_map[chunk[:, 1]]
            _edge_hash_accumulate(s_, d_, acc_src)
            if rel is not None:
                et = np.asarray(rel[at : at + chunk.shape[0]], np.int64)
                _edge_hash_accumulate(s_ * r + et, d_, ref_rel)
                at += chunk.shape[0]
        if not np.array_equal(acc_src, acc_store):
            v = int(np.flatnonzero(acc_src != acc_store)[0])
            i = int(store.owner([v])[0])
            _fail(
                f"core node {int(inv[v])} (new id {v}) of part {i}: its in-edges differ from "
                "the source graph's",
                path / f"part_{i}" / "indices.npy",
            )
        checks.append("each core node's in-edge multiset equals the source graph's")
        if not np.array_equal(acc_bucket, acc_src):
            v = int(np.flatnonzero(acc_bucket != acc_src)[0])
            i = int(store.owner([v])[0])
            _fail(
                f"node {int(inv[v])} (new id {v}): the edge buckets (*_{i}.bin) hold other "
                "in-edges than the source graph",
                path / "buckets",
            )
        checks.append("edge buckets hold exactly the source graph's edges")
        if rel is not None:
            if not np.array_equal(acc_rel, ref_rel):
                v = int(np.flatnonzero(acc_rel != ref_rel)[0])
                i = int(store.owner([v])[0])
                _fail(
                    f"core node {int(inv[v])} (new id {v}) of part {i}: its in-edges' relations "
                    "differ from the source graph's",
                    path / f"part_{i}" / "edge_types.npy",
                )
            checks.append("each core node's in-edges with their relations equal the source graph's")
        _check_node_data(store, g, inv, checks)
    return {"ok": True, "store": str(path), "files": nfiles, "checks": checks, "skipped": skipped}


def _check_node_data(store: Store, g: GraphDir, inv: np.ndarray, checks: list[str]) -> None:
    """Labels, masks and every node type's core (and halo) feature rows equal the source's;
    an untyped store is one type, ``features.npy``, with the parts' core ranges. A store of
    another feature dtype than the graph's holds the source rows converted (int8: with their
    scales, ``X.scales.npy``)."""
    source = feature_dtype(g.meta.get("feature_dtype"), path=g.path / "meta.json")
    target = source if store.schema is not None else feature_dtype(store.meta.get("feature_dtype"))

    def source_rows(src: Path, ids: np.ndarray) -> bytes:
        x = gather_rows(src, ids)
        sc = gather_rows(scales_path(src), ids) if source.scaled else None
        x, sc = convert_block(x, sc, source, target)
        return x.tobytes() + (b"" if sc is None else sc.tobytes())

    def stored_rows(f: Path, s: int, e: int) -> bytes:
        sc = read_rows(scales_path(f), s, e).tobytes() if target.scaled else b""
        return read_rows(f, s, e).tobytes() + sc

    labels_path = g.path / "labels.npy"
    masks = {s: g.mask(s) for s in SPLITS}
    schema, block = store.schema, 1 << 14
    if schema is None:
        types, bounds = (
            [("", "features.npy", 0)],
            np.stack([store.part_offsets[:-1], store.part_offsets[1:]], 1),
        )
    else:
        types = [(f"{t.name} ", type_feature_file(t.name), t.offset) for t in schema.node_types]
        bounds = store.type_bounds
    for part in store.parts():
        i, core_old = part.index, inv[part.start : part.stop]
        if labels_path.exists():
            if part.labels is None or not np.array_equal(
                read_rows(part.path / "labels.npy", 0, part.num_core),
                gather_rows(labels_path, core_old),
            ):
                _fail(f"part {i}: labels differ from the source rows", part.path / "labels.npy")
        for s in SPLITS:
            if not np.array_equal(np.asarray(part.mask(s)), masks[s][core_old]):
                _fail(
                    f"part {i}: {s} mask differs from the source split", part.path / f"{s}_mask.npy"
                )
        halo = np.asarray(part.halo_ids, dtype=np.int64)
        for t, (what, name, offset) in enumerate(types):
            src, f, hf = g.path / name, part.path / name, part.path / f"halo_{name}"
            if not src.exists():
                continue
            for fp in (f, hf) if store.halo_features else (f,):
                if not fp.exists():
                    _fail(f"part {i}: {what}features are missing", fp)
            lo, hi = (int(v) for v in bounds[i, t : t + 2])
            for s in range(lo, hi, block):
                e = min(hi, s + block)
                if stored_rows(f, s - lo, e - lo) != source_rows(src, inv[s:e] - offset):
                    _fail(
                        f"part {i}: {what}feature rows {s - lo}..{e - lo - 1} differ from the "
                        "source rows",
                        f,
                    )
            h = halo if schema is None else halo[store.type_of(halo) == t]
            for s in range(0, h.shape[0] if store.halo_features else 0, block):
                if stored_rows(hf, s, min(s + block, h.shape[0])) != source_rows(
                    src, inv[h[s : s + block]] - offset
                ):
                    _fail(
                        f"part {i}: {what}halo feature rows {s}.. differ from the source rows", hf
                    )
    checks.append(
        "labels, split masks and every node type's feature rows (core and halo) equal the source rows"
    )


def inspect_store(path: str | os.PathLike) -> dict[str, Any]:
    """Per-part summary (nodes, halo, edges, split counts, bytes) plus RF and edge cut."""
    store = Store.open(path)
    meta = store.meta
    parts = []
    files = meta.get("files", {})
    for i, info in enumerate(meta["parts"]):
        prefix = f"part_{i}/"
        nbytes = sum(v["bytes"] for k, v in files.items() if k.startswith(prefix))
        parts.append(
            {
                "part": i,
                "nodes": info["num_core"],
                "halo": info["num_halo"],
                "edges": info["num_edges"],
                **{k: info.get(k, 0) for k in SPLITS},
                "bytes": nbytes,
            }
        )
    return {
        "store": str(store.path),
        "num_parts": store.num_parts,
        "num_nodes": store.num_nodes,
        "num_edges": store.num_edges,
        "feature_dim": store.feature_dim,
        "halo_features": store.halo_features,
        "bytes": sum(v["bytes"] for v in files.values()),
        "replication_factor": meta["metrics"]["replication_factor"],
        "edge_cut": meta["metrics"]["edge_cut"],
        "partition": {
            "algorithm": meta.get("partition", {}).get("algorithm"),
            "metrics": meta.get("partition", {}).get("metrics", {}),
        },
        "bucket_counts": meta["buckets"]["counts"],
        "parts": parts,
        **_typed_summary(store),
    }


def _typed_summary(store: Store) -> dict[str, Any]:
    """A typed store's node types (count and nodes per part, feature width) and relations."""
    if store.schema is None:
        return {}
    b = np.diff(store.type_bounds, axis=1)
    dims = store.type_feature_dims
    return {
        "node_types": [
            {
                "name": t.name,
                "count": t.count,
                "per_part": b[:, k].tolist(),
                "feature_dim": dims.get(t.name),
            }
            for k, t in enumerate(store.schema.node_types)
        ],
        "relations": [str(e) for e in store.schema.edge_types],
        "target_type": store.schema.target,
    }
