"""The assignment directory written by ``shoal partition`` (read by ``shoal store build``).

Layout::

    meta.json       format "shoal-assignment", format_version, algorithm, params, num_parts,
                    num_nodes, num_edges, graph (name, path, edge checksum), metrics, files
    node_part.npy   int32 (N,): owner part of every node
    edge_part.npy   int16 or int32 (E,): part of every edge (vertex-cut algorithms only),
                    aligned with the graph's edge file

It is written to a temporary sibling and renamed into place.
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Any

import numpy as np

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.partition.base import Assignment
from shoal.utils.diskspace import open_output_memmap
from shoal.utils.io import (
    atomic_output_dir,
    copy_rows,
    file_checksum,
    read_meta,
    write_json_atomic,
)

__all__ = [
    "ASSIGNMENT_FORMAT_VERSION",
    "check_matches_graph",
    "read_assignment",
    "write_assignment",
]

ASSIGNMENT_FORMAT = "shoal-assignment"
ASSIGNMENT_FORMAT_VERSION = 1


def _graph_identity(graph: GraphDir) -> dict[str, Any]:
    files = graph.meta.get("files", {})
    edge_file = graph.meta.get("edge_file", "edges.bin")
    return {
        "name": graph.name,
        "path": str(graph.path.resolve()),
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "edges_checksum": files.get(edge_file, {}).get("checksum"),
    }


def write_assignment(
    out: str | os.PathLike,
    assignment: Assignment,
    graph: GraphDir,
    *,
    metrics: dict[str, Any] | None = None,
    command: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``assignment`` (computed on ``graph``) to the directory ``out``."""
    a = assignment
    if a.num_nodes != graph.num_nodes:
        raise ValueError(f"assignment has {a.num_nodes} nodes, graph has {graph.num_nodes}")
    with atomic_output_dir(out, overwrite=overwrite) as tmp:
        np.save(tmp / "node_part.npy", a.node_part.astype(np.int32))
        if a.edge_part is not None:
            dtype = np.int16 if a.num_parts <= np.iinfo(np.int16).max else np.int32
            ep = open_output_memmap(tmp / "edge_part.npy", dtype, (graph.num_edges,))
            step = 1 << 22
            for s in range(0, graph.num_edges, step):
                ep[s : s + step] = copy_rows(a.edge_part, s, s + step)
            ep.flush()
            del ep
        meta = {
            "format": ASSIGNMENT_FORMAT,
            "format_version": ASSIGNMENT_FORMAT_VERSION,
            "algorithm": a.algorithm,
            "num_parts": int(a.num_parts),
            "num_nodes": int(a.num_nodes),
            "num_edges": int(graph.num_edges),
            "vertex_cut": a.edge_part is not None,
            "params": a.params,
            "seconds": a.seconds,
            "metrics": metrics or {},
            "graph": _graph_identity(graph),
            "command": command,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "files": {
                p.name: {"bytes": p.stat().st_size, "checksum": file_checksum(p)}
                for p in sorted(tmp.iterdir())
            },
        }
        write_json_atomic(tmp / "meta.json", meta)
    return Path(out)


def read_assignment(path: str | os.PathLike, *, mmap: bool = True) -> tuple[Assignment, dict]:
    """Read an assignment directory; returns ``(assignment, meta)``. Validates the format,
    the node_part length and range."""
    path = Path(path)
    meta = read_meta(
        path,
        kind=ASSIGNMENT_FORMAT,
        version=ASSIGNMENT_FORMAT_VERSION,
        what="an assignment directory",
        fix="create one with `shoal partition GRAPH_DIR --out DIR`",
    )
    node_part = np.load(path / "node_part.npy", mmap_mode="r" if mmap else None)
    n, p = int(meta["num_nodes"]), int(meta["num_parts"])
    if node_part.shape != (n,):
        raise ShoalInputError(
            f"node_part.npy has shape {node_part.shape}, meta.json says num_nodes={n}",
            path=path / "node_part.npy",
            fix="the assignment is corrupt or from another graph; re-run `shoal partition`",
        )
    if n:
        lo, hi = int(node_part.min()), int(node_part.max())
        if lo < 0 or hi >= p:
            bad = int(np.flatnonzero((node_part < 0) | (node_part >= p))[0])
            raise ShoalInputError(
                f"row {bad}: part id {int(node_part[bad])} is out of range [0, {p})",
                path=path / "node_part.npy",
                fix="the assignment is corrupt; re-run `shoal partition`",
            )
    ep_path = path / "edge_part.npy"
    edge_part = np.load(ep_path, mmap_mode="r" if mmap else None) if ep_path.exists() else None
    a = Assignment(
        node_part=node_part,
        num_parts=p,
        algorithm=meta.get("algorithm", "?"),
        params=meta.get("params", {}),
        edge_part=edge_part,
        seconds=meta.get("seconds", {}),
    )
    return a, meta


def check_matches_graph(meta: dict, graph: GraphDir, *, path: object = None) -> None:
    """Raise :class:`ShoalInputError` if an assignment's meta was not made from ``graph``."""
    ident = meta.get("graph", {})
    ours = _graph_identity(graph)
    for key in ("num_nodes", "num_edges", "edges_checksum"):
        if ident.get(key) is not None and ident.get(key) != ours[key]:
            raise ShoalInputError(
                f"assignment was made from another graph ({key}: {ident.get(key)} vs "
                f"{ours[key]} in {graph.path})",
                path=path,
                fix="partition this graph with `shoal partition` first",
            )
