"""Streaming writer of the partitioned store (``shoal store build``).

The layout combines DistDGL (Zheng et al., IA3 2020: contiguous core ID ranges, full
in-neighbourhoods with halo nodes), SDT-GNN (``halo_features``: replicated halo feature rows)
and Armada (Waleffe et al., 2025: edge buckets per ``(owner(src), owner(dst))``); layout,
meta.json and the passes: docs/store.md#how-it-is-written-bounded-memory. Memory: O(V) numpy
state plus bounded buffers (one edge chunk, the external sort's cap, one feature block); no
large file is streamed through a memory map. Passes 1 and 2 are in
:mod:`shoal.store._structure`, pass 3 in :mod:`shoal.store._features`. Temporary files go to a
private directory inside ``Config.scratch_dir``, else beside the output (never the system temp
dir); the store is written to a temporary sibling of the output and renamed into place.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shoal.data.format import SPLITS, GraphDir, edge_dtype_for
from shoal.errors import ShoalInputError
from shoal.partition.grem import in_degrees
from shoal.partition.io import check_matches_graph, read_assignment
from shoal.store._features import write_features
from shoal.store._io import write_meta
from shoal.store._structure import make_layout, relabel, write_edges, write_parts
from shoal.store._typed import TypedLayout, type_bounds, write_typed_features
from shoal.store.format import STORE_FORMAT, STORE_FORMAT_VERSION, STORE_TYPED_FORMAT_VERSION
from shoal.utils.diskspace import open_output_memmap
from shoal.utils.featdtype import feature_dtype
from shoal.utils.io import atomic_output_dir, file_checksum, scratch_space
from shoal.utils.memory import peak_rss_bytes

__all__ = [
    "NODE_ORDERS",
    "STORE_FORMAT",
    "STORE_FORMAT_VERSION",
    "Config",
    "build_store",
    "store_bytes",
]

#: orders of the core nodes inside a part (``Config.node_order``; the first is the default)
NODE_ORDERS = ("id", "degree")


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
        scratch_dir: where a private directory holds the temporary files (per-part in-edge
            files and sort runs, about the edge file's size; with ``node_order="degree"`` the
            feature buckets too, the feature matrix's; default None: beside the output).
        node_order: order of the core nodes inside each part (:data:`NODE_ORDERS`): ``"id"``,
            ascending original ID (DistDGL's order), or ``"degree"``, descending in-degree
            (ties in original ID; one more pass over the edges and one more write and read of
            the features). Default ``"id"``: docs/store.md#id-spaces and
            docs/measurements.md#node-order-in-the-store.
        feature_dtype: the parts' stored feature dtype, a name of
            :data:`~shoal.utils.featdtype.FEATURE_DTYPES` (default None: the graph's); another
            than the graph's converts the rows block by block first (docs/format.md#feature-dtypes).
    """

    halo_features: bool = False
    chunk_edges: int = 1 << 18
    sort_memory: int = 32 * 2**20
    feature_block_bytes: int = 16 * 2**20
    overwrite: bool = False
    show_progress: bool | None = None
    command: str | None = None
    scratch_dir: str | None = None
    node_order: str = "id"
    feature_dtype: str | None = None

    def __post_init__(self) -> None:
        if self.feature_dtype is not None:
            feature_dtype(self.feature_dtype)
        if self.node_order not in NODE_ORDERS:
            raise ShoalInputError(
                f"node_order must be one of {', '.join(NODE_ORDERS)}, got {self.node_order!r}"
            )
        if self.chunk_edges < 1:
            raise ShoalInputError(f"chunk_edges must be >= 1, got {self.chunk_edges}")
        if self.sort_memory < 2**20:
            raise ShoalInputError(f"sort_memory must be >= 1 MiB, got {self.sort_memory}")
        if self.feature_block_bytes < 1:
            raise ShoalInputError(
                f"feature_block_bytes must be >= 1, got {self.feature_block_bytes}"
            )
        if self.scratch_dir is not None:
            self.scratch_dir = os.fspath(self.scratch_dir)


class _Phases:
    """Wall seconds of each phase, and the peak RSS after it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.rss: dict[str, int] = {}

    @contextlib.contextmanager
    def __call__(self, name: str, *, rss: bool = True) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        self.seconds[name] = time.perf_counter() - t0
        if rss:
            self.rss[name] = peak_rss_bytes()


def _read_inputs(g: GraphDir, adir: Path, cfg: Config) -> tuple[np.ndarray, int, dict[str, Any]]:
    """(node_part int32 (N,), num_parts, assignment meta), checked against the graph."""
    assignment, ameta = read_assignment(adir)
    check_matches_graph(ameta, g, path=adir)
    n = g.num_nodes
    if assignment.num_nodes != n:
        raise ShoalInputError(
            f"node_part has {assignment.num_nodes} rows, the graph {g.path} has {n} nodes",
            path=adir / "node_part.npy",
            fix="partition this graph with `shoal partition` first",
        )
    has_features = (g.path / "features.npy").exists() or (
        g.schema is not None and (g.path / "features").is_dir()
    )
    if g.schema is not None and cfg.feature_dtype is not None:
        raise ShoalInputError(
            "--feature-dtype is not supported for a typed graph yet: its parts keep the "
            "graph's dtype",
            path=g.path,
            fix="drop --feature-dtype, or give the typed graph that dtype when it is written",
        )
    if g.schema is not None and cfg.node_order != "id":
        raise ShoalInputError(
            f"node_order {cfg.node_order!r} is not supported for a typed graph: its parts keep "
            "each node type as one range of new ids, in original order",
            path=g.path,
            fix="drop --node-order (a typed store numbers nodes by id)",
        )
    if cfg.halo_features and not has_features:
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
    return node_part, p, ameta


def _file_table(tmp: Path) -> tuple[dict[str, Any], int]:
    """(``files`` of meta.json: relative path -> bytes and checksum, total bytes)."""
    files: dict[str, Any] = {}
    total_bytes = 0
    for f in sorted(tmp.rglob("*")):
        if f.is_file():
            size = f.stat().st_size
            total_bytes += size
            files[f.relative_to(tmp).as_posix()] = {"bytes": size, "checksum": file_checksum(f)}
    return files, total_bytes


def _metrics(
    parts_meta: list[dict[str, Any]], counts: np.ndarray, offsets: np.ndarray, n: int, m: int
) -> dict[str, Any]:
    p = offsets.shape[0] - 1
    present = sum(pm["num_core"] + pm["num_halo"] for pm in parts_meta)
    cut = int(m - np.trace(counts))
    return {
        "replication_factor": (present / n) if n else 1.0,
        "edge_cut": (cut / m) if m else 0.0,
        "cut_edges": cut,
        "max_part_nodes_over_mean": (float(np.diff(offsets).max() / (n / p)) if n else 1.0),
    }


def _write_link_edges(
    g: GraphDir, tmp: Path, node_map: np.ndarray, chunk: int
) -> dict[str, int] | None:
    """The held-out positives of a link split (``link_val.npy``, ``link_test.npy`` of the
    graph, ``shoal data split-edges``) in the store's new ids, chunk by chunk, and a typed
    split's fixed evaluation negatives (``link_<split>_neg.npy``) likewise; their counts
    (None when the graph has none)."""
    out: dict[str, int] = {}
    files = ((_split_meta(g).get("negatives") or {}).get("files")) or {}
    for name in ("val", "test"):
        e = g.link_edges(name)
        if e is None:
            continue
        _map_rows(e, tmp / f"link_{name}.npy", node_map, chunk)
        if name in files and (g.path / files[name]).exists():
            neg = np.load(g.path / files[name], mmap_mode="r")
            _map_rows(neg, tmp / f"link_{name}_neg.npy", node_map, chunk)
        out[name] = len(e)
    return out or None


def _split_meta(g: GraphDir) -> dict[str, Any]:
    """The graph's ``link_split`` meta (empty when it was not split)."""
    return dict(g.meta.get("link_split") or {})


def _map_rows(src: np.ndarray, path: Path, node_map: np.ndarray, chunk: int) -> None:
    """``src``'s ids in new ids, written to ``path`` chunk by chunk."""
    dst = open_output_memmap(path, np.int64, tuple(src.shape))
    for s in range(0, len(src), chunk):
        dst[s : s + chunk] = node_map[np.asarray(src[s : s + chunk], dtype=np.int64)]
    dst.flush()
    del dst


def store_bytes(
    g: GraphDir, ameta: dict[str, Any], *, halo_features: bool, edge_dtype: np.dtype
) -> int:
    """The bytes a store of ``g`` takes at least, known before writing: every node's feature
    row once (times the assignment's replication factor with halo features), every edge's
    source id once in its destination's part, the node maps and labels. ``build_store``
    refuses up front when the output's filesystem has fewer free."""
    feats = [g.path / "features.npy"]
    if (g.path / "features").is_dir():
        feats += sorted((g.path / "features").glob("*.npy"))
    feature_bytes = sum(f.stat().st_size for f in feats if f.is_file())
    rf = float(ameta.get("metrics", {}).get("replication_factor") or 1.0)
    if halo_features:
        feature_bytes = int(feature_bytes * max(rf, 1.0))
    n, m = g.num_nodes, g.num_edges
    labels = 8 * n if (g.path / "labels.npy").exists() else 0
    return feature_bytes + m * np.dtype(edge_dtype).itemsize + 2 * 8 * n + labels


def build_store(
    graph: GraphDir | str | os.PathLike,
    assignment_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    config: Config | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Write the partitioned store of ``graph`` under ``assignment_dir`` to ``out``.

    ``options`` are :class:`Config` fields when ``config`` is not given. Atomic (temporary
    sibling, renamed). Returns a summary (counts, bytes, seconds, peak RSS).

    Raises:
        ShoalInputError: the assignment is malformed (length != N, part ids out of range) or
            was made from another graph.
    """
    cfg = config or Config(**options)
    g = graph if isinstance(graph, GraphDir) else GraphDir.open(graph)
    adir, out = Path(assignment_dir), Path(out)
    node_part, p, ameta = _read_inputs(g, adir, cfg)
    n, m = g.num_nodes, g.num_edges
    phase = _Phases()
    with phase("relabel", rss=False):
        deg = in_degrees(g, max(cfg.chunk_edges, 1 << 22)) if cfg.node_order == "degree" else None
        offsets, node_map, inv = relabel(node_part, p, deg)
        del deg
    layout = bounds = None
    if g.schema is not None:  # a typed graph: relations with the edges, features per type
        layout = TypedLayout.of(g)
        layout.prepare(offsets, edge_dtype_for(max(n, 1)))
        bounds = type_bounds(g.schema, node_part, p)
    edtype = edge_dtype_for(max(n, 1))
    splits = {s: g.split(s) for s in SPLITS}
    show, chunk = cfg.show_progress, cfg.chunk_edges
    need = store_bytes(g, ameta, halo_features=cfg.halo_features, edge_dtype=edtype)
    with (
        atomic_output_dir(out, overwrite=cfg.overwrite, need=need) as tmp,
        scratch_space(cfg.scratch_dir, beside=out, prefix="shoal-store") as work,
    ):
        np.save(tmp / "part_offsets.npy", offsets)
        np.save(tmp / "node_map.npy", node_map)
        np.save(tmp / "node_map_inv.npy", inv)
        make_layout(tmp, work, p)
        with phase("edges"):
            counts = write_edges(
                g,
                tmp,
                work,
                node_part,
                node_map,
                offsets,
                edtype,
                chunk_edges=chunk,
                show=show,
                layout=layout,
            )
            link = _write_link_edges(g, tmp, node_map, chunk)
        del node_map
        with phase("parts"):
            parts_meta, halo_lists = write_parts(
                g,
                tmp,
                work,
                offsets,
                inv,
                counts,
                edtype,
                splits,
                chunk_edges=chunk,
                sort_memory=cfg.sort_memory,
                show=show,
                typed=None if layout is None else (layout, bounds),
            )
        with phase("features"):
            if layout is not None:
                type_dims = write_typed_features(
                    g,
                    tmp,
                    node_part,
                    bounds,
                    halo_lists,
                    halo_features=cfg.halo_features,
                    block_bytes=cfg.feature_block_bytes,
                    show=show,
                )
                feature_dim, feature_dtype = None, "float32" if type_dims else None
            else:
                feature_dim, feature_dtype = write_features(
                    g,
                    tmp,
                    node_part,
                    offsets,
                    halo_lists,
                    halo_features=cfg.halo_features,
                    block_bytes=cfg.feature_block_bytes,
                    show=show,
                    work=work if cfg.node_order != "id" else None,
                    scratch=work,
                    dtype=cfg.feature_dtype,
                )
        with phase("meta"):
            files, total_bytes = _file_table(tmp)
            metrics = _metrics(parts_meta, counts, offsets, n, m)
        meta = {  # the fields: docs/store.md
            "format": STORE_FORMAT,
            "format_version": STORE_FORMAT_VERSION,
            "num_parts": int(counts.shape[0]),
            "num_nodes": g.num_nodes,
            "num_edges": g.num_edges,
            "directed": g.directed,
            "id_dtype": "int64",
            "edge_dtype": edtype.name,
            "feature_dim": feature_dim,
            "feature_dtype": feature_dtype,
            "num_classes": g.num_classes,
            "has_labels": (g.path / "labels.npy").exists(),
            "halo_features": bool(cfg.halo_features and feature_dim is not None),
            "node_order": cfg.node_order,
            "link_edges": link,
            "link_split": _split_meta(g) or None,
            "splits": {s: 0 if splits[s] is None else int(splits[s].shape[0]) for s in SPLITS},
            "part_offsets": [int(x) for x in offsets],
            "parts": parts_meta,
            "buckets": {
                "layout": "buckets/edges_{src_part}_{dst_part}.bin: raw (k, 2) row-major "
                "(new src id, new dst id), in the graph's edge order",
                "counts": counts.tolist(),
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
                "num_nodes": g.num_nodes,
                "num_edges": g.num_edges,
                "edges_checksum": g.meta.get("files", {})
                .get(g.meta.get("edge_file", "edges.bin"), {})
                .get("checksum"),
            },
            "command": cfg.command or " ".join(sys.argv),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "files": files,
        }
        if layout is not None:
            meta.update(
                format_version=STORE_TYPED_FORMAT_VERSION,
                schema=layout.schema.to_meta(),
                type_bounds=bounds.tolist(),
                relation_dtype=layout.relation_dtype.name,
                type_feature_dims=type_dims,
                halo_features=bool(cfg.halo_features and type_dims),
            )
        write_meta(tmp / "meta.json", meta)

    return {
        "store": str(out),
        "num_parts": p,
        "num_nodes": n,
        "num_edges": m,
        "parts": parts_meta,
        "metrics": metrics,
        "bytes": total_bytes,
        "seconds": {k: round(v, 3) for k, v in phase.seconds.items()},
        "peak_rss_bytes": peak_rss_bytes(),
        "peak_rss_bytes_after": phase.rss,
    }
