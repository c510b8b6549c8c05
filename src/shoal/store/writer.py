"""Streaming writer of the partitioned store (``shoal store build``; layout in ``docs/store.md``).

The store combines three published layouts:

- **DistDGL** (Zheng et al., "DistDGL: Distributed Graph Neural Network Training for
  Billion-Scale Graphs", IA3 2020, graph partitioning): node IDs are relabelled so that the
  core nodes of part ``i`` occupy one contiguous range ``[part_offsets[i], part_offsets[i+1])``;
  each part keeps its core nodes' *full* in-neighbourhood, with the in-neighbours owned
  elsewhere duplicated as halo nodes (structure only; their features stay with their owner
  unless ``halo_features`` is set).
- **SDT-GNN** (full neighbourhoods per part and replicated halo features for local training;
  the seed paper summarised in DESIGN.md): ``halo_features=True`` also writes the halo nodes'
  feature rows into the part.
- **Armada** (Waleffe et al., "Armada: Memory-Efficient Distributed Training of Large-Scale Graph
  Neural Networks", 2025, edge buckets): every edge is also stored once in the bucket file of
  ``(owner(src), owner(dst))``, sequentially, so a worker that holds parts ``S`` reads exactly
  the buckets ``S x S`` with sequential I/O.

Memory: O(V) numpy state (owner part, old->new and new->old maps, a boolean scratch mask) plus
bounded buffers: one edge chunk, the external sort's cap, one feature block. The writer never
memory-maps a large file for streaming (mapped pages count in the resident set): edges are read
with :class:`~shoal.data.stream.EdgeStream`, features with positioned reads, and outputs are
appended with plain writes.

Passes:

1. one pass over the edge stream: relabel each chunk, append every edge to its bucket file and
   to a temporary in-edge file of its destination's part (as ``(new src, local dst)``);
2. per part, an external sort of that file by destination (the graph directory's bounded-memory
   CSR builder) gives the local CSR with global sources; a streaming pass over it marks the halo
   nodes and rewrites the sources as local indices over core then halo;
3. one sequential pass over the feature matrix scatters rows to their part (core rows of a part
   are in ascending original ID, the order of the relabelling); halo rows are then gathered from
   their owners' core feature files.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shoal.data.extsort import build_csr_files
from shoal.data.format import SPLITS, GraphDir, edge_dtype_for
from shoal.data.stream import EdgeStream
from shoal.errors import ShoalInputError
from shoal.partition.io import check_matches_graph, read_assignment
from shoal.store._io import NpyAppender, gather_rows, npy_info, read_rows, write_meta
from shoal.utils.io import atomic_output_dir, file_checksum
from shoal.utils.memory import peak_rss_bytes
from shoal.utils.progress import progress

__all__ = ["STORE_FORMAT", "STORE_FORMAT_VERSION", "Config", "build_store"]

STORE_FORMAT = "shoal-store"
STORE_FORMAT_VERSION = 1


@dataclass(kw_only=True)
class Config:
    """Options of :func:`build_store`.

    Args:
        halo_features: also store each part's halo feature rows (``halo_features.npy``), as
            local/averaging training needs (default false, as in DistDGL).
        chunk_edges: edges per streamed chunk (default 2**18).
        sort_memory: memory cap in bytes of the per-part external sort (default 32 MiB).
        feature_block_bytes: bytes of feature rows read per block (default 16 MiB).
        overwrite: replace an existing output directory (default false).
        show_progress: progress bars on stderr; None = only on a terminal (default None).
        command: the creation command recorded in meta.json (default: ``sys.argv``).
    """

    halo_features: bool = False
    chunk_edges: int = 1 << 18
    sort_memory: int = 32 * 2**20
    feature_block_bytes: int = 16 * 2**20
    overwrite: bool = False
    show_progress: bool | None = None
    command: str | None = None

    def __post_init__(self) -> None:
        if self.chunk_edges < 1:
            raise ShoalInputError(f"chunk_edges must be >= 1, got {self.chunk_edges}")
        if self.sort_memory < 2**20:
            raise ShoalInputError(f"sort_memory must be >= 1 MiB, got {self.sort_memory}")
        if self.feature_block_bytes < 1:
            raise ShoalInputError(
                f"feature_block_bytes must be >= 1, got {self.feature_block_bytes}"
            )


def _relabel(node_part: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(part_offsets (p+1), node_map old->new, node_map_inv new->old); stable inside parts."""
    counts = np.bincount(node_part, minlength=p).astype(np.int64)
    offsets = np.zeros(p + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    inv = np.argsort(node_part, kind="stable").astype(np.int64)
    node_map = np.empty_like(inv)
    node_map[inv] = np.arange(inv.shape[0], dtype=np.int64)
    return offsets, node_map, inv


def _in_sorted(ids: np.ndarray, sorted_set: np.ndarray | None) -> np.ndarray:
    """Boolean mask of ``ids`` present in the sorted array ``sorted_set`` (None = empty)."""
    if sorted_set is None or sorted_set.shape[0] == 0:
        return np.zeros(ids.shape[0], dtype=bool)
    pos = np.searchsorted(sorted_set, ids)
    pos[pos == sorted_set.shape[0]] = 0
    return np.asarray(sorted_set[pos]) == ids


def build_store(
    graph: GraphDir | str | os.PathLike,
    assignment_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    config: Config | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Write the partitioned store of ``graph`` under ``assignment_dir`` to ``out``.

    ``options`` are :class:`Config` fields (e.g. ``halo_features=True``) when ``config`` is not
    given. The store is written to a temporary sibling and renamed into place; on any error
    nothing is left behind. Returns a summary (counts, bytes, seconds, peak RSS).

    Raises:
        ShoalInputError: the assignment is malformed (length != N, part ids out of range) or
            was made from another graph.
    """
    cfg = config or Config(**options)
    g = graph if isinstance(graph, GraphDir) else GraphDir.open(graph)
    adir = Path(assignment_dir)
    assignment, ameta = read_assignment(adir)
    check_matches_graph(ameta, g, path=adir)
    n, m = g.num_nodes, g.num_edges
    if assignment.num_nodes != n:
        raise ShoalInputError(
            f"node_part has {assignment.num_nodes} rows, the graph {g.path} has {n} nodes",
            path=adir / "node_part.npy",
            fix="partition this graph with `shoal partition` first",
        )
    if cfg.halo_features and not (g.path / "features.npy").exists():
        raise ShoalInputError(
            "--halo-features needs node features, but the graph has no features.npy",
            path=g.path,
            fix="drop --halo-features, or import the graph with features",
        )
    p = int(assignment.num_parts)
    node_part = np.asarray(assignment.node_part, dtype=np.int32)
    if n and (node_part.min() < 0 or node_part.max() >= p):
        bad = int(np.flatnonzero((node_part < 0) | (node_part >= p))[0])
        raise ShoalInputError(
            f"row {bad}: part id {int(node_part[bad])} is out of range [0, {p})",
            path=adir / "node_part.npy",
            fix="the assignment is corrupt; re-run `shoal partition`",
        )

    seconds: dict[str, float] = {}
    rss: dict[str, int] = {}  # peak RSS after each phase
    t0 = time.perf_counter()
    offsets, node_map, inv = _relabel(node_part, p)
    seconds["relabel"] = time.perf_counter() - t0
    edtype = edge_dtype_for(max(n, 1))
    show = cfg.show_progress
    out = Path(out)

    with atomic_output_dir(out, overwrite=cfg.overwrite) as tmp:
        work = tmp / ".work"
        work.mkdir()
        np.save(tmp / "part_offsets.npy", offsets)
        np.save(tmp / "node_map.npy", node_map)
        np.save(tmp / "node_map_inv.npy", inv)
        (tmp / "buckets").mkdir()
        for i in range(p):
            (tmp / f"part_{i}").mkdir()
            (work / f"in_{i}.bin").touch()
            for j in range(p):
                (tmp / "buckets" / f"edges_{i}_{j}.bin").touch()

        # ---- pass 1: edge buckets and per-part in-edge files ----------------------------
        t0 = time.perf_counter()
        bucket_counts = np.zeros(p * p, dtype=np.int64)  # index src_part * p + dst_part
        stream = g.edge_stream(cfg.chunk_edges)
        for chunk in progress(stream, total=len(stream), desc="store: edges", enable=show):
            s_old = chunk[:, 0]
            d_old = chunk[:, 1]
            ps = node_part[s_old].astype(np.int64)
            pd = node_part[d_old].astype(np.int64)
            key = pd * p + ps  # grouped by destination part, then source part
            order = np.argsort(key, kind="stable")
            key = key[order]
            rows = np.empty((order.shape[0], 2), dtype=edtype)
            rows[:, 0] = node_map[s_old[order]]
            rows[:, 1] = node_map[d_old[order]]
            bounds = np.flatnonzero(np.r_[True, key[1:] != key[:-1], True])
            for a, b in zip(bounds[:-1], bounds[1:]):
                dp, sp = divmod(int(key[a]), p)
                block = rows[a:b]
                with open(tmp / "buckets" / f"edges_{sp}_{dp}.bin", "ab") as f:
                    block.tofile(f)
                bucket_counts[sp * p + dp] += b - a
            dbounds = np.flatnonzero(np.r_[True, (key[1:] // p) != (key[:-1] // p), True])
            for a, b in zip(dbounds[:-1], dbounds[1:]):
                dp = int(key[a]) // p
                local = rows[a:b].copy()
                local[:, 1] -= offsets[dp]
                with open(work / f"in_{dp}.bin", "ab") as f:
                    local.tofile(f)
        seconds["edges"] = time.perf_counter() - t0
        rss["edges"] = peak_rss_bytes()

        # ---- pass 2: per-part CSR, halo, local indices ----------------------------------
        t0 = time.perf_counter()
        counts_pp = bucket_counts.reshape(p, p)
        in_edges = counts_pp.sum(axis=0)
        del node_map
        labels_path = g.path / "labels.npy"
        has_labels = labels_path.exists()
        splits = {s: g.split(s) for s in SPLITS}
        scratch = np.zeros(n, dtype=bool)
        parts_meta: list[dict[str, Any]] = []
        halo_lists: list[np.ndarray] = []
        for i in progress(range(p), total=p, desc="store: parts", enable=show):
            lo, hi = int(offsets[i]), int(offsets[i + 1])
            n_i, e_i = hi - lo, int(in_edges[i])
            pdir = tmp / f"part_{i}"
            csr_dir = work / f"csr_{i}"
            build_csr_files(
                EdgeStream(work / f"in_{i}.bin", e_i, edtype),
                n_i,
                csr_dir,
                kind="in",
                memory_bytes=cfg.sort_memory,
                indices_dtype=edtype,
            )
            (work / f"in_{i}.bin").unlink()
            os.replace(csr_dir / "indptr.npy", pdir / "indptr.npy")
            gidx = csr_dir / "indices.npy"
            step = cfg.chunk_edges
            for s in range(0, e_i, step):
                ids = read_rows(gidx, s, s + step)
                scratch[ids[(ids < lo) | (ids >= hi)]] = True
            halo = np.flatnonzero(scratch).astype(np.int64)
            scratch[halo] = False
            np.save(pdir / "halo_ids.npy", halo)
            with NpyAppender(pdir / "indices.npy", edtype, (e_i,)) as w:
                for s in range(0, e_i, step):
                    ids = read_rows(gidx, s, s + step).astype(np.int64)
                    core = (ids >= lo) & (ids < hi)
                    loc = np.where(core, ids - lo, n_i + np.searchsorted(halo, ids))
                    w.append(loc)
            shutil.rmtree(csr_dir)
            core_old = inv[lo:hi]
            np.save(pdir / "orig_ids.npy", np.concatenate([core_old, inv[halo]]))
            if has_labels:
                np.save(pdir / "labels.npy", gather_rows(labels_path, core_old).astype(np.int64))
            split_counts = {}
            for s in SPLITS:
                mk = _in_sorted(core_old, splits[s])
                np.save(pdir / f"{s}_mask.npy", mk)
                split_counts[s] = int(mk.sum())
            halo_lists.append(halo)
            parts_meta.append(
                {
                    "num_core": n_i,
                    "num_halo": int(halo.shape[0]),
                    "num_edges": e_i,
                    **split_counts,
                }
            )
        del scratch
        seconds["parts"] = time.perf_counter() - t0
        rss["parts"] = peak_rss_bytes()

        # ---- pass 3: features ----------------------------------------------------------
        t0 = time.perf_counter()
        feat_path = g.path / "features.npy"
        feature_dim = feature_dtype = None
        if feat_path.exists():
            fdtype, fshape, _ = npy_info(feat_path)
            feature_dim, feature_dtype = int(fshape[1]), fdtype.name
            row_bytes = max(1, fshape[1] * fdtype.itemsize)
            block = max(1, cfg.feature_block_bytes // row_bytes)
            writers = [
                NpyAppender(
                    tmp / f"part_{i}" / "features.npy",
                    fdtype,
                    (int(offsets[i + 1] - offsets[i]), fshape[1]),
                )
                for i in range(p)
            ]
            try:
                bar = progress(total=n, desc="store: features", unit="row", enable=show)
                for s in range(0, n, block):
                    x = read_rows(feat_path, s, s + block)
                    owner = node_part[s : s + x.shape[0]]
                    order = np.argsort(owner, kind="stable")
                    ob = np.flatnonzero(np.r_[True, owner[order][1:] != owner[order][:-1], True])
                    for a, b in zip(ob[:-1], ob[1:]):
                        writers[int(owner[order[a]])].append(x[order[a:b]])
                    bar.update(x.shape[0])
                bar.close()
            finally:
                for w in writers:
                    w.close()
            if cfg.halo_features:
                gblock = max(1, cfg.feature_block_bytes // row_bytes)
                for i in progress(range(p), total=p, desc="store: halo features", enable=show):
                    halo = halo_lists[i]
                    if halo.size == 0:
                        np.save(
                            tmp / f"part_{i}" / "halo_features.npy",
                            np.empty((0, fshape[1]), dtype=fdtype),
                        )
                        continue
                    owners = np.searchsorted(offsets, halo, side="right") - 1
                    with NpyAppender(
                        tmp / f"part_{i}" / "halo_features.npy", fdtype, (halo.shape[0], fshape[1])
                    ) as w:
                        hb = np.flatnonzero(np.r_[True, owners[1:] != owners[:-1], True])
                        for a, b in zip(hb[:-1], hb[1:]):
                            j = int(owners[a])
                            rows = halo[a:b] - offsets[j]
                            for s in range(0, rows.shape[0], gblock):
                                w.append(
                                    gather_rows(
                                        tmp / f"part_{j}" / "features.npy", rows[s : s + gblock]
                                    )
                                )
        seconds["features"] = time.perf_counter() - t0
        rss["features"] = peak_rss_bytes()

        # ---- metadata -------------------------------------------------------------------
        t0 = time.perf_counter()
        shutil.rmtree(work)
        files: dict[str, Any] = {}
        total_bytes = 0
        for f in sorted(tmp.rglob("*")):
            if f.is_file():
                rel = f.relative_to(tmp).as_posix()
                size = f.stat().st_size
                total_bytes += size
                files[rel] = {"bytes": size, "checksum": file_checksum(f)}
        present = sum(pm["num_core"] + pm["num_halo"] for pm in parts_meta)
        cut = int(m - np.trace(counts_pp))
        metrics = {
            "replication_factor": (present / n) if n else 1.0,
            "edge_cut": (cut / m) if m else 0.0,
            "cut_edges": cut,
            "max_part_nodes_over_mean": (float(np.diff(offsets).max() / (n / p)) if n else 1.0),
        }
        seconds["meta"] = time.perf_counter() - t0
        rss["meta"] = peak_rss_bytes()
        meta: dict[str, Any] = {
            "format": STORE_FORMAT,
            "format_version": STORE_FORMAT_VERSION,
            "num_parts": p,
            "num_nodes": n,
            "num_edges": m,
            "directed": g.directed,
            "id_dtype": "int64",
            "edge_dtype": edtype.name,
            "feature_dim": feature_dim,
            "feature_dtype": feature_dtype,
            "num_classes": g.num_classes,
            "has_labels": has_labels,
            "halo_features": bool(cfg.halo_features and feature_dim is not None),
            "splits": {s: 0 if splits[s] is None else int(splits[s].shape[0]) for s in SPLITS},
            "part_offsets": [int(x) for x in offsets],
            "parts": parts_meta,
            "buckets": {
                "layout": "buckets/edges_{src_part}_{dst_part}.bin: raw (k, 2) row-major "
                "(new src id, new dst id), in the graph's edge order",
                "counts": counts_pp.tolist(),
            },
            "metrics": metrics,
            "partition": {
                "algorithm": ameta.get("algorithm"),
                "params": ameta.get("params", {}),
                "metrics": ameta.get("metrics", {}),
                "seconds": ameta.get("seconds", {}),
                "path": str(adir.resolve()),
                "command": ameta.get("command"),
            },
            "graph": {
                "name": g.name,
                "path": str(g.path.resolve()),
                "num_nodes": n,
                "num_edges": m,
                "edges_checksum": g.meta.get("files", {})
                .get(g.meta.get("edge_file", "edges.bin"), {})
                .get("checksum"),
            },
            "command": cfg.command or " ".join(sys.argv),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "files": files,
        }
        write_meta(tmp / "meta.json", meta)

    return {
        "store": str(out),
        "num_parts": p,
        "num_nodes": n,
        "num_edges": m,
        "parts": parts_meta,
        "metrics": metrics,
        "bytes": total_bytes,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "peak_rss_bytes": peak_rss_bytes(),
        "peak_rss_bytes_after": rss,
    }
