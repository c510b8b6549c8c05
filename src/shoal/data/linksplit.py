"""Edge splits for link prediction (``shoal data split-edges``), streamed with O(1) memory.

A graph directory is split into a **message-passing graph** holding only the training edges
(with the source's node data: features, labels, node splits) and two sets of held-out
positive edges, ``link_val.npy`` and ``link_test.npy`` (``(k, 2)`` int64 rows of src, dst).

Each edge's split is a function of its **unordered** pair ``{u, v}`` and the seed (a 64-bit
mix of ``(min, max, seed)`` compared with the fractions), so both directions of an undirected
edge, the reverse of a directed edge that has one, and repeats of a pair land in the same split
without the stream being held or sorted: nothing of a held-out pair leaks into message passing.
Fractions are therefore expected values (binomial counts); the counts drawn are recorded in
``meta.json`` under ``link_split``. Self-loops are never held out (they stay in training).
An undirected graph's held-out pairs are stored once (``src < dst``); a directed graph's as
given. This is PyG's ``RandomLinkSplit`` and OGB's edge splits without the in-memory shuffle.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shoal.data.format import GraphDir, GraphWriter
from shoal.data.layout import SPLITS
from shoal.data.stream import DEFAULT_CHUNK_EDGES
from shoal.errors import ShoalInputError

__all__ = ["LINK_SPLITS", "EdgeSplitConfig", "edge_split_of", "split_edges"]

#: held-out sets, stored as ``link_<name>.npy``
LINK_SPLITS = ("val", "test")
_TRAIN, _VAL, _TEST = 0, 1, 2
_M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F)


@dataclass(kw_only=True)
class EdgeSplitConfig:
    """Options of :func:`split_edges`.

    Attributes:
        val: expected fraction of the (non-loop) edges held out for validation (default 0.05).
        test: expected fraction held out for testing (default 0.1).
        seed: seed of the split (default 0); the same seed gives the same split.
        overwrite: replace an existing output directory (default false).
        chunk_edges: edges per streamed chunk (default 1 Mi).
    """

    val: float = 0.05
    test: float = 0.1
    seed: int = 0
    overwrite: bool = False
    chunk_edges: int = DEFAULT_CHUNK_EDGES

    def __post_init__(self) -> None:
        for name in ("val", "test"):
            v = getattr(self, name)
            if not 0.0 <= v < 1.0:
                raise ShoalInputError(
                    f"--{name} must be in [0, 1), got {v}", fix=f"pass e.g. --{name} 0.05"
                )
        if self.val + self.test >= 1.0:
            raise ShoalInputError(
                f"--val + --test = {self.val + self.test:g} leaves no training edges",
                fix="hold out less than all edges (e.g. --val 0.05 --test 0.1)",
            )
        if self.seed < 0:
            raise ShoalInputError(f"--seed must be >= 0, got {self.seed}")
        if self.chunk_edges < 1:
            raise ShoalInputError(f"chunk_edges must be >= 1, got {self.chunk_edges}")


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over uint64 (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def edge_split_of(edges: np.ndarray, val: float, test: float, seed: int) -> np.ndarray:
    """Split of each ``(k, 2)`` edge: 0 train, 1 val, 2 test (uint8); self-loops are 0.

    A function of the unordered pair and ``seed`` only (module docstring)."""
    e = np.asarray(edges, dtype=np.int64)
    lo = np.minimum(e[:, 0], e[:, 1]).astype(np.uint64)
    hi = np.maximum(e[:, 0], e[:, 1]).astype(np.uint64)
    with np.errstate(over="ignore"):
        h = _mix(_mix(lo * _M1 + np.uint64(seed)) ^ (hi * _M2))
    u = (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))  # uniform in [0, 1)
    out = np.where(u < val, _VAL, np.where(u < val + test, _TEST, _TRAIN)).astype(np.uint8)
    out[e[:, 0] == e[:, 1]] = _TRAIN
    return out


class _RowsFile:
    """An ``(k, 2)`` int64 ``.npy`` written by appending rows (header fixed at the end)."""

    def __init__(self, path: Path) -> None:
        self.path, self.raw, self.rows = path, path.with_suffix(".raw64"), 0
        self._f = open(self.raw, "wb")

    def append(self, e: np.ndarray) -> None:
        np.ascontiguousarray(e, dtype=np.int64).tofile(self._f)
        self.rows += len(e)

    def close(self) -> int:
        self._f.close()
        header = {"descr": "<i8", "fortran_order": False, "shape": (self.rows, 2)}
        with open(self.path, "wb") as f, open(self.raw, "rb") as src:
            np.lib.format.write_array_header_1_0(f, header)
            while block := src.read(1 << 24):
                f.write(block)
        self.raw.unlink()
        return self.rows


def _copy_node_data(g: GraphDir, w: GraphWriter) -> None:
    x = g.features()
    if x is not None:
        w.write_features(x, origin=str(g.path / "features.npy"))
    y = g.labels()
    if y is not None:
        w.write_labels(y, origin=str(g.path / "labels.npy"), num_classes=g.num_classes)
    for s in SPLITS:
        idx = g.split(s)
        if idx is not None:
            w.write_split(s, idx, origin=str(g.path / f"{s}_idx.npy"))


def split_edges(
    graph: str | os.PathLike | GraphDir,
    out: str | os.PathLike,
    config: EdgeSplitConfig | None = None,
) -> GraphDir:
    """Write ``out``: ``graph`` with only its training edges, plus ``link_val.npy`` and
    ``link_test.npy`` (module docstring). One pass over the edges; memory: one chunk."""
    cfg = config or EdgeSplitConfig()
    g = graph if isinstance(graph, GraphDir) else GraphDir.open(graph)
    if Path(out).exists() and not cfg.overwrite:
        raise ShoalInputError(
            "output already exists", path=out, fix="choose another --out or pass --overwrite"
        )
    source: dict[str, Any] = {
        "input": str(g.path),
        "command": "split-edges",
        "options": {"val": cfg.val, "test": cfg.test, "seed": cfg.seed},
    }
    counts = {"train": 0, "val": 0, "test": 0, "self_loops_kept": 0}
    with GraphWriter(
        out,
        num_nodes=g.num_nodes,
        directed=g.directed,
        name=g.name,
        source=source,
        overwrite=cfg.overwrite,
    ) as w:
        held = {name: _RowsFile(w.tmp / f"link_{name}.npy") for name in LINK_SPLITS}
        for chunk in g.edge_stream(cfg.chunk_edges):
            e = np.asarray(chunk, dtype=np.int64)
            which = edge_split_of(e, cfg.val, cfg.test, cfg.seed)
            w.add_edges(e[which == _TRAIN], origin=f"{g.path} (edges)")
            counts["train"] += int((which == _TRAIN).sum())
            counts["self_loops_kept"] += int((e[:, 0] == e[:, 1]).sum())
            for code, name in ((_VAL, "val"), (_TEST, "test")):
                sel = e[which == code]
                counts[name] += len(sel)
                if not g.directed:  # each undirected pair once, src < dst
                    sel = sel[sel[:, 0] < sel[:, 1]]
                held[name].append(sel)
        rows = {name: f.close() for name, f in held.items()}
        _copy_node_data(g, w)
        w.extra_meta["link_split"] = {
            "val_fraction": cfg.val,
            "test_fraction": cfg.test,
            "seed": cfg.seed,
            "pairs": "unordered: both directions of a pair share its split",
            "stored_edges": counts,
            "val_edges": rows["val"],
            "test_edges": rows["test"],
            "held_out_layout": "src < dst, each pair once" if not g.directed else "as given",
        }
    return GraphDir.open(out)
