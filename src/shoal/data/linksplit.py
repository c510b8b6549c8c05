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

**Typed graphs**: only the edges of one *target relation* (GraphStorm's ``target_etype``;
``EdgeSplitConfig.target_relation``) are split, its reverse's held-out pairs leave with them,
and typed evaluation negatives are written beside the positives: docs/linkpred.md#typed-graphs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shoal.data.format import GraphDir, GraphWriter
from shoal.data.hetero import EdgeType, HeteroSchema, NodeType
from shoal.data.hetero_writer import HeteroGraphWriter
from shoal.data.layout import EDGE_FILE, RELATION_FILE, SPLITS, type_feature_file
from shoal.data.stream import DEFAULT_CHUNK_EDGES
from shoal.errors import ShoalInputError

__all__ = [
    "DEFAULT_EVAL_NEGATIVES",
    "LINK_SPLITS",
    "EdgeSplitConfig",
    "edge_split_of",
    "resolve_target_relation",
    "split_edges",
]

#: held-out sets, stored as ``link_<name>.npy`` (and a typed graph's ``link_<name>_neg.npy``)
LINK_SPLITS = ("val", "test")
#: evaluation negatives per held-out positive of a typed split (the trainer's
#: ``--eval-negatives`` default)
DEFAULT_EVAL_NEGATIVES = 100
#: held-out positives per block of negatives, each block from its own stream (the trainer's
#: ``shoal.training.linkdata.EVAL_CHUNK``)
_NEG_BLOCK = 1 << 14
_NEG_STREAM = 0xE7A1  # the trainer's evaluation-negative stream tag
_SPLIT_CODE = {"val": 1, "test": 2}
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
        target_relation: a typed graph's relation to predict: a relation name that is unique
            or ``src__relation__dst`` (default: its only relation; required with several).
        eval_negatives: a typed graph's evaluation negatives per held-out positive (default
            :data:`DEFAULT_EVAL_NEGATIVES`); untyped graphs take none (the trainer draws them).
    """

    val: float = 0.05
    test: float = 0.1
    seed: int = 0
    overwrite: bool = False
    chunk_edges: int = DEFAULT_CHUNK_EDGES
    target_relation: str | None = None
    eval_negatives: int | None = None

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
        if self.eval_negatives is not None and self.eval_negatives < 1:
            raise ShoalInputError(
                f"--eval-negatives must be >= 1, got {self.eval_negatives}",
                fix=f"pass e.g. --eval-negatives {DEFAULT_EVAL_NEGATIVES}",
            )


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
    """An ``(k, width)`` int64 ``.npy`` written by appending rows (header fixed at the end)."""

    def __init__(self, path: Path, width: int = 2) -> None:
        self.path, self.raw, self.rows = path, path.with_suffix(".raw64"), 0
        self.width = width
        self._f = open(self.raw, "wb")

    def append(self, e: np.ndarray) -> None:
        np.ascontiguousarray(e, dtype=np.int64).tofile(self._f)
        self.rows += len(e)

    def close(self) -> int:
        self._f.close()
        header = {"descr": "<i8", "fortran_order": False, "shape": (self.rows, self.width)}
        with open(self.path, "wb") as f, open(self.raw, "rb") as src:
            np.lib.format.write_array_header_1_0(f, header)
            while block := src.read(1 << 24):
                f.write(block)
        self.raw.unlink()
        return self.rows


def _hold_out(
    held: dict[str, _RowsFile], counts: dict[str, int], e: np.ndarray, which: np.ndarray, once: bool
) -> None:
    """Count the edges ``e`` of a chunk by their split ``which`` and append the held-out ones
    to ``held``; with ``once``, each pair only as ``src < dst``."""
    counts["train"] += int((which == _TRAIN).sum())
    counts["self_loops_kept"] += int((e[:, 0] == e[:, 1]).sum())
    for code, name in ((_VAL, "val"), (_TEST, "test")):
        sel = e[which == code]
        counts[name] += len(sel)
        if once:
            sel = sel[sel[:, 0] < sel[:, 1]]
        held[name].append(sel)


def _link_meta(
    cfg: EdgeSplitConfig, counts: dict[str, int], rows: dict[str, int], layout: str
) -> dict[str, Any]:
    """``meta.json``'s ``link_split`` fields of every split (a typed one adds its own)."""
    return {
        "val_fraction": cfg.val,
        "test_fraction": cfg.test,
        "seed": cfg.seed,
        "pairs": "unordered: both directions of a pair share its split",
        "stored_edges": counts,
        "val_edges": rows["val"],
        "test_edges": rows["test"],
        "held_out_layout": layout,
    }


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
    if g.schema is not None:
        return _split_typed(g, out, cfg)
    for opt, v in (
        ("target-relation", cfg.target_relation),
        ("eval-negatives", cfg.eval_negatives),
    ):
        if v is not None:
            raise ShoalInputError(
                f"--{opt} is for typed graphs; this graph has no node types or relations",
                path=g.path / "meta.json",
                fix=f"drop --{opt} (the link trainer draws an untyped graph's negatives itself)",
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
            _hold_out(held, counts, e, which, once=not g.directed)
        rows = {name: f.close() for name, f in held.items()}
        _copy_node_data(g, w)
        layout = "src < dst, each pair once" if not g.directed else "as given"
        w.extra_meta["link_split"] = _link_meta(cfg, counts, rows, layout)
    return GraphDir.open(out)


# ---------------------------------------------------------------------- typed graphs


def resolve_target_relation(
    schema: HeteroSchema, name: str | None, *, path: object | None = None
) -> int:
    """The index of the relation a typed link split predicts: ``name`` (a relation name that
    is unique, or ``src__relation__dst``), or the only relation when ``name`` is None."""
    listing = ", ".join(f"{e} ({e.count:,} edges)" for e in schema.edge_types)
    if name is None:
        if len(schema.edge_types) == 1:
            return 0
        raise ShoalInputError(
            f"a typed graph with {len(schema.edge_types)} relations: the link task predicts "
            f"one, and none was chosen; its relations: {listing}",
            path=path,
            fix="pass --target-relation NAME (a relation name, or src__relation__dst)",
        )
    for i, e in enumerate(schema.edge_types):
        if str(e) == name:
            return i
    try:
        return schema.relation_index(name)
    except ShoalInputError as err:
        raise ShoalInputError(
            f"--target-relation {name!r}: {str(err).split(' -> ')[0]}; its relations: {listing}",
            path=path,
            fix="pass a relation name that names one edge type, or src__relation__dst",
        ) from err


def _check_relations(r: np.ndarray, num_relations: int, start: int, path: Path) -> None:
    bad = np.flatnonzero(r >= num_relations)
    if bad.size:
        row = int(bad[0])
        raise ShoalInputError(
            f"row {start + row}: relation index {int(r[row])}, but meta.json declares "
            f"{num_relations} relations (edge_types)",
            path=path,
            fix="the file is corrupt or belongs to another graph; write the graph again",
        )


def _add_runs(w: HeteroGraphWriter, e: np.ndarray, r: np.ndarray, origin: str) -> None:
    """Append global-id rows ``e`` of relations ``r`` in their order (a run of one relation
    per call); a chunk whose relations interleave finely is grouped by relation instead."""
    if not len(e):
        return
    cut = np.flatnonzero(r[1:] != r[:-1]) + 1
    if len(cut) > 64:
        order = np.argsort(r, kind="stable")
        e, r = e[order], r[order]
        cut = np.flatnonzero(r[1:] != r[:-1]) + 1
    for a, b in zip([0, *cut.tolist()], [*cut.tolist(), len(e)], strict=True):
        w.add_relation(w.schema.edge_types[int(r[a])].key, e[a:b], origin=origin, local=False)


def _write_negatives(path: Path, rows: int, k: int, dst: NodeType, seed: int, split: str) -> None:
    """``(rows, k)`` evaluation negatives, uniform over ``dst``'s global ids: block ``c`` of
    :data:`_NEG_BLOCK` positives from ``default_rng([seed, 0xE7A1, 1|2, c])``, the stream of the
    trainer's ``eval_negative_chunk`` over the type's local ids, shifted by its offset."""
    f = _RowsFile(path, width=k)
    for c, s in enumerate(range(0, rows, _NEG_BLOCK)):
        rng = np.random.default_rng([seed, _NEG_STREAM, _SPLIT_CODE[split], c])
        f.append(
            int(dst.offset) + rng.integers(0, int(dst.count), size=(min(_NEG_BLOCK, rows - s), k))
        )
    f.close()


def _copy_typed_node_data(g: GraphDir, w: HeteroGraphWriter) -> None:
    """Every node type's features (copied in row blocks, dtype kept), the target type's
    labels and splits (given to the writer in the type's local ids)."""
    for nt in g.schema.node_types:
        x = g.node_features(nt.name)
        if x is not None:
            origin = str(g.path / type_feature_file(nt.name))
            w.write_node_features(nt.name, x, origin=origin, dtype=x.dtype)
    tt = w.schema.node_type(w.schema.target)
    lo, hi = int(tt.offset), int(tt.offset) + int(tt.count)
    y = g.labels()
    if y is not None:
        w.write_labels(y[lo:hi], origin=str(g.path / "labels.npy"), num_classes=g.num_classes)
    for s in SPLITS:
        idx = g.split(s)
        if idx is not None:
            w.write_split(s, np.asarray(idx) - lo, origin=str(g.path / f"{s}_idx.npy"))


def _split_typed(g: GraphDir, out: str | os.PathLike, cfg: EdgeSplitConfig) -> GraphDir:
    """:func:`split_edges` of a typed graph (module docstring)."""
    schema = g.schema
    assert schema is not None
    t = resolve_target_relation(schema, cfg.target_relation, path=g.path / "meta.json")
    target = schema.edge_types[t]
    if target.count == 0:
        raise ShoalInputError(
            f"relation {target} has no edges: nothing to split",
            path=g.path / "meta.json",
            fix="choose a relation with edges: "
            + ", ".join(f"{e} ({e.count:,})" for e in schema.edge_types if e.count),
        )
    rev = int(schema.reverse_index()[t])
    # a same-type relation of a graph stored with its reverses holds both directions itself
    symmetric = not g.directed and target.src == target.dst and rev < 0
    dst = schema.node_type(target.dst)
    k_neg = cfg.eval_negatives or DEFAULT_EVAL_NEGATIVES
    options = {
        "val": cfg.val,
        "test": cfg.test,
        "seed": cfg.seed,
        "target_relation": str(target),
        "eval_negatives": k_neg,
    }
    source: dict[str, Any] = {"input": str(g.path), "command": "split-edges", "options": options}
    out_schema = HeteroSchema(
        [NodeType(n.name, n.count, n.offset) for n in schema.node_types],
        [EdgeType(e.src, e.relation, e.dst) for e in schema.edge_types],
        schema.target,
    )
    relations = g.relations()
    counts = {
        "train": 0,
        "val": 0,
        "test": 0,
        "self_loops_kept": 0,
        "reverse_removed": 0,
        "other_relations": 0,
    }
    with HeteroGraphWriter(
        out, out_schema, name=g.name, source=source, overwrite=cfg.overwrite
    ) as w:
        w.directed = g.directed  # the reverses are copied as stored, not added again
        w.source = source
        held = {name: _RowsFile(w.tmp / f"link_{name}.npy") for name in LINK_SPLITS}
        edges_at = g.path / g.meta.get("edge_file", EDGE_FILE)
        rel_at = g.path / g.meta.get("relation_file", RELATION_FILE)
        for start, chunk in g.edge_stream(cfg.chunk_edges).chunks_with_offset():
            e = np.array(chunk, dtype=np.int64)
            r = np.asarray(relations[start : start + len(e)])
            _check_relations(r, len(schema.edge_types), start, rel_at)
            keep = np.ones(len(e), bool)
            on_t = r == t
            et = e[on_t]
            which = edge_split_of(et, cfg.val, cfg.test, cfg.seed)
            keep[on_t] = which == _TRAIN
            on_rev = r == rev if rev >= 0 else np.zeros(len(e), bool)
            if rev >= 0:
                keep[on_rev] = edge_split_of(e[on_rev], cfg.val, cfg.test, cfg.seed) == _TRAIN
                counts["reverse_removed"] += int((on_rev & ~keep).sum())
            counts["other_relations"] += int((~on_t & ~on_rev).sum())
            _hold_out(held, counts, et, which, once=symmetric)
            _add_runs(w, e[keep], r[keep], f"{edges_at} rows {start}..{start + len(e) - 1}")
        rows = {name: f.close() for name, f in held.items()}
        for name in LINK_SPLITS:
            _write_negatives(w.tmp / f"link_{name}_neg.npy", rows[name], k_neg, dst, cfg.seed, name)
        _copy_typed_node_data(g, w)
        layout = (
            "src < dst, each pair once"
            if symmetric
            else f"as given: source of type {target.src}, destination of type {target.dst}"
        )
        w.extra_meta["link_split"] = {
            **_link_meta(cfg, counts, rows, layout),
            "ids": "global",
            "target_relation": str(target),
            "target_relation_index": t,
            "target_edge_type": {"src": target.src, "relation": target.relation, "dst": target.dst},
            "reverse_relation": str(schema.edge_types[rev]) if rev >= 0 else None,
            "negatives": {
                "node_type": dst.name,
                "id_range": [int(dst.offset), int(dst.offset) + int(dst.count)],
                "per_positive": k_neg,
                "files": {name: f"link_{name}_neg.npy" for name in LINK_SPLITS},
                "distribution": "uniform over the destination type's global ids "
                "(lo <= id < hi of id_range), drawn once from the seed",
            },
        }
    return GraphDir.open(out)
