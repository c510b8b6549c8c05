"""Passes 1 and 2 of the store writer (private; the passes:
docs/store.md#how-it-is-written-bounded-memory): relabelling, edge buckets, per-part CSRs,
and each part's labels and split masks gathered from the graph's. The temporary in-edge
files and sort runs go to ``work`` (the writer's scratch directory).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from shoal.data.extsort import build_csr_files
from shoal.data.format import SPLITS, GraphDir
from shoal.data.stream import EdgeStream
from shoal.store._io import NpyAppender, gather_rows, read_rows
from shoal.store._typed import TypedLayout, build_typed_csr
from shoal.utils.progress import progress

__all__ = ["make_layout", "relabel", "write_edges", "write_parts"]


def relabel(
    node_part: np.ndarray, p: int, in_degree: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(part_offsets (p+1), node_map old->new, node_map_inv new->old). Inside a part, nodes
    keep their original order, or with ``in_degree`` come in descending in-degree (ties in
    original order)."""
    counts = np.bincount(node_part, minlength=p).astype(np.int64)
    offsets = np.zeros(p + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    if in_degree is None:
        inv = np.argsort(node_part, kind="stable").astype(np.int64)
    else:
        inv = np.lexsort((-np.asarray(in_degree, dtype=np.int64), node_part)).astype(np.int64)
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


def make_layout(tmp: Path, work: Path, p: int) -> None:
    """The part folders, the (empty) bucket files and the per-part in-edge files."""
    (tmp / "buckets").mkdir()
    for i in range(p):
        (tmp / f"part_{i}").mkdir()
        (work / f"in_{i}.bin").touch()
        for j in range(p):
            (tmp / "buckets" / f"edges_{i}_{j}.bin").touch()


def write_edges(
    g: GraphDir,
    tmp: Path,
    work: Path,
    node_part: np.ndarray,
    node_map: np.ndarray,
    offsets: np.ndarray,
    edtype: np.dtype,
    *,
    chunk_edges: int,
    show: bool | None,
    layout: TypedLayout | None = None,
) -> np.ndarray:
    """Pass 1: the edge buckets (in ``tmp/buckets``) and the per-part in-edge files (in
    ``work``). Returns the bucket counts, int64 ``(p, p)`` indexed ``[src_part, dst_part]``.
    ``layout``: a typed graph's relation encoding: its in-edge rows are ``(new src, local dst
    * rin + slot)`` (:mod:`shoal.store._typed`)."""
    p = offsets.shape[0] - 1
    bucket_counts = np.zeros(p * p, dtype=np.int64)  # index src_part * p + dst_part
    stream = g.edge_stream(chunk_edges)
    at = 0
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
            with open(tmp / "buckets" / f"edges_{sp}_{dp}.bin", "ab") as f:
                rows[a:b].tofile(f)
            bucket_counts[sp * p + dp] += b - a
        if layout is not None:
            slots = layout.slot_of[layout.relations(at, chunk.shape[0])][order]
            at += chunk.shape[0]
        dbounds = np.flatnonzero(np.r_[True, (key[1:] // p) != (key[:-1] // p), True])
        for a, b in zip(dbounds[:-1], dbounds[1:]):
            dp = int(key[a]) // p
            if layout is None:
                local = rows[a:b].copy()
                local[:, 1] -= offsets[dp]
            else:
                local = rows[a:b].astype(layout.in_dtype)
                local[:, 1] = (local[:, 1] - offsets[dp]) * layout.rin + slots[a:b]
            with open(work / f"in_{dp}.bin", "ab") as f:
                local.tofile(f)
    return bucket_counts.reshape(p, p)


def write_parts(
    g: GraphDir,
    tmp: Path,
    work: Path,
    offsets: np.ndarray,
    inv: np.ndarray,
    bucket_counts: np.ndarray,
    edtype: np.dtype,
    splits: dict[str, np.ndarray | None],
    *,
    chunk_edges: int,
    sort_memory: int,
    show: bool | None,
    typed: tuple[TypedLayout, np.ndarray] | None = None,
) -> tuple[list[dict[str, Any]], list[np.ndarray]]:
    """Pass 2: every part's local CSR (``indptr``, ``indices``), ``halo_ids``, ``orig_ids``,
    labels and masks from its in-edge file. Returns (per-part meta, per-part halo ids).
    ``typed``: a typed graph's ``(layout, (p, T + 1) type bounds)``."""
    p = offsets.shape[0] - 1
    in_edges = bucket_counts.sum(axis=0)
    labels_path = g.path / "labels.npy"
    labels = labels_path if labels_path.exists() else None
    mark = np.zeros(g.num_nodes, dtype=bool)
    parts_meta: list[dict[str, Any]] = []
    halo_lists: list[np.ndarray] = []
    for i in progress(range(p), total=p, desc="store: parts", enable=show):
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        e_i = int(in_edges[i])
        pdir = tmp / f"part_{i}"
        n_i, csr_dir = hi - lo, work / f"csr_{i}"
        if typed is None:
            build_csr_files(
                EdgeStream(work / f"in_{i}.bin", e_i, edtype),
                n_i,
                csr_dir,
                kind="in",
                memory_bytes=sort_memory,
                indices_dtype=edtype,
            )  # its sort runs stay in ``work``, beside its input and output
        else:  # rows sorted by relation, and edge_types.npy beside the CSR
            build_typed_csr(
                work / f"in_{i}.bin",
                e_i,
                typed[1][i] - lo,
                typed[0],
                csr_dir,
                edtype=edtype,
                sort_memory=sort_memory,
            )
            os.replace(csr_dir / "edge_types.npy", pdir / "edge_types.npy")
        (work / f"in_{i}.bin").unlink()
        os.replace(csr_dir / "indptr.npy", pdir / "indptr.npy")
        gidx = csr_dir / "indices.npy"
        for s in range(0, e_i, chunk_edges):
            ids = read_rows(gidx, s, s + chunk_edges)
            mark[ids[(ids < lo) | (ids >= hi)]] = True
        halo = np.flatnonzero(mark).astype(np.int64)
        mark[halo] = False  # an all-false (N,) scratch array again
        np.save(pdir / "halo_ids.npy", halo)
        with NpyAppender(pdir / "indices.npy", edtype, (e_i,)) as w:
            for s in range(0, e_i, chunk_edges):
                ids = read_rows(gidx, s, s + chunk_edges).astype(np.int64)
                core = (ids >= lo) & (ids < hi)
                w.append(np.where(core, ids - lo, n_i + np.searchsorted(halo, ids)))
        shutil.rmtree(csr_dir)
        core_old = inv[lo:hi]
        np.save(pdir / "orig_ids.npy", np.concatenate([core_old, inv[halo]]))
        if labels is not None:
            np.save(pdir / "labels.npy", gather_rows(labels, core_old).astype(np.int64))
        split_counts = {}
        for s in SPLITS:
            mk = _in_sorted(core_old, splits[s])
            np.save(pdir / f"{s}_mask.npy", mk)
            split_counts[s] = int(mk.sum())
        halo_lists.append(halo)
        parts_meta.append(
            {"num_core": hi - lo, "num_halo": int(halo.shape[0]), "num_edges": e_i, **split_counts}
        )
    return parts_meta, halo_lists
