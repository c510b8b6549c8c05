"""Importer of the raw layout of OGB node-property datasets, without the ``ogb`` package
(:func:`import_ogb`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from shoal.data.format import SPLITS, GraphDir
from shoal.data.importers.common import (
    ImportConfig,
    check_ids,
    check_out_free,
    make_writer,
    with_num_nodes,
)
from shoal.data.importers.text import numbered_data_lines, open_text, text_edge_chunks
from shoal.errors import ShoalInputError

__all__ = ["import_ogb"]


def _ogb_file(d: Path, rel: str, required: bool = True) -> Path | None:
    for cand in (d / rel, d / rel.removesuffix(".gz")):
        if cand.exists():
            return cand
    if required:
        raise ShoalInputError(
            f"OGB layout: {rel} is missing",
            path=d,
            fix="point at the dataset folder holding raw/ and split/ (e.g. ogbn_arxiv/)",
        )
    return None


def _ogb_float_blocks(path: Path, n: int) -> Iterator[np.ndarray]:
    with open_text(path) as f:
        ncols = None
        for nums, lines in numbered_data_lines(f, path):
            try:
                a = np.loadtxt(lines, dtype=np.float32, delimiter=",", ndmin=2, comments=None)
            except ValueError as e:
                # find the line for the message
                for ln, line in zip(nums, lines):
                    try:
                        np.loadtxt([line], dtype=np.float32, delimiter=",", ndmin=2)
                    except ValueError:
                        raise ShoalInputError(
                            f"line {ln}: cannot parse feature row ({e})",
                            path=path,
                            fix="each line must hold F comma-separated numbers",
                        ) from None
                raise ShoalInputError(f"cannot parse features: {e}", path=path) from None
            if ncols is None:
                ncols = a.shape[1]
            elif a.shape[1] != ncols:
                raise ShoalInputError(
                    f"line {nums[0]}: feature rows have {a.shape[1]} columns, earlier rows {ncols}",
                    path=path,
                    fix="every feature row must have the same number of columns",
                )
            yield a


def _ogb_read_ids(path: Path, what: str) -> np.ndarray:
    parts = [rows[:, 0] for _, rows in text_edge_chunks(path, ncols=1, what=what)]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _ogb_labels(path: Path, n: int) -> np.ndarray:
    y = np.full(n, -1, dtype=np.int64)
    pos = 0
    with open_text(path) as f:
        for nums, lines in numbered_data_lines(f, path):
            vals = np.empty(len(lines), dtype=np.float64)
            for i, (ln, t) in enumerate(zip(nums, lines)):
                t = t.split(",")[0].strip()
                try:
                    v = float(t)
                except ValueError:
                    v = None
                if v is None or (np.isfinite(v) and not v.is_integer()) or np.isinf(v):
                    raise ShoalInputError(
                        f"line {ln}: label {t!r} is not an integer",
                        path=path,
                        fix="labels must be integer classes (nan or -1 = unlabelled)",
                    )
                vals[i] = v
            if pos + len(lines) > n:
                raise ShoalInputError(
                    f"line {nums[-1]}: more label rows than num_nodes={n}",
                    path=path,
                    fix="give one label per node",
                )
            y[pos : pos + len(lines)] = np.where(np.isnan(vals), -1, vals).astype(np.int64)
            pos += len(lines)
    if pos != n:
        raise ShoalInputError(
            f"{pos} label rows but num_nodes={n}", path=path, fix="give one label per node"
        )
    return y


def _ogb_num_nodes(d: Path, n: int | None) -> int | None:
    """``n`` when given, else the count in ``raw/num-node-list.csv(.gz)`` when present."""
    nn_path = _ogb_file(d, "raw/num-node-list.csv.gz", required=False)
    if n is not None or nn_path is None:
        return n
    counts = _ogb_read_ids(nn_path, "node counts")
    if counts.size != 1:
        raise ShoalInputError(
            f"expected one node count (one graph), got {counts.size}",
            path=nn_path,
            fix="only single-graph (node-property) OGB datasets are supported",
        )
    return int(counts[0])


def _ogb_split_dir(d: Path, scheme: str | None) -> Path | None:
    """The folder of the split scheme to use under ``split/`` (None: no splits)."""
    if not (d / "split").is_dir():
        return None
    schemes = sorted(p.name for p in (d / "split").iterdir() if p.is_dir())
    if scheme is not None:
        if scheme not in schemes:
            raise ShoalInputError(
                f"split scheme {scheme!r} not found (have {schemes})",
                path=d / "split",
                fix="pass one of the folders under split/",
            )
        return d / "split" / scheme
    if len(schemes) > 1:
        raise ShoalInputError(
            f"several split schemes {schemes}",
            path=d / "split",
            fix="choose one with --split-scheme",
        )
    return d / "split" / schemes[0] if schemes else None


def import_ogb(
    src: str | os.PathLike, out: str | os.PathLike, config: ImportConfig | None = None
) -> GraphDir:
    """Import an OGB node-property dataset from its raw files, without the ``ogb`` package.

    Layout (as unpacked from the OGB zip, e.g. ``ogbn_arxiv/``)::

        raw/edge.csv.gz            one "src,dst" per line (required)
        raw/num-node-list.csv.gz   number of nodes (optional; else max id + 1)
        raw/node-feat.csv.gz       N lines of F comma-separated floats (optional)
        raw/node-label.csv.gz      N lines, one class each (nan = unlabelled) (optional)
        split/<scheme>/{train,valid,test}.csv.gz   node ids, one per line (optional)

    Everything is parsed in blocks of 256 Ki lines; only O(N) arrays (labels, split ids) are
    held. OGB stores ogbn-products' undirected edges once and ogbn-arxiv as a directed citation
    graph: pass ``undirected=True`` (``--undirected``) to add reverse edges, as OGB's own
    loaders do for products. Datasets shipped as ``.npz`` raw files (ogbn-papers100M's
    ``data.npz``) are not read by this importer: convert their ``edge_index`` to ``.npy``.
    """
    cfg = config or ImportConfig()
    d = Path(src)
    if not d.is_dir():
        raise ShoalInputError("OGB import needs the dataset folder", path=d)
    edge_path = _ogb_file(d, "raw/edge.csv.gz")
    assert edge_path is not None
    n = _ogb_num_nodes(d, cfg.num_nodes)
    feat_path = _ogb_file(d, "raw/node-feat.csv.gz", required=False)
    label_path = _ogb_file(d, "raw/node-label.csv.gz", required=False)
    split_dir = _ogb_split_dir(d, cfg.split_scheme)
    check_out_free(out, cfg)
    wcfg = with_num_nodes(cfg, n)
    with make_writer(out, wcfg, {"input": str(d), "importer": "ogb"}) as w:
        for nums, rows in text_edge_chunks(edge_path):
            check_ids(rows, w.num_nodes, nums, edge_path)
            w.add_edges(rows, origin=f"{edge_path} (block from line {nums[0]})")
        n = w.finish_edges()
        if feat_path is not None:
            w.write_features(_ogb_float_blocks(feat_path, n), origin=str(feat_path))
        if label_path is not None:
            w.write_labels(
                _ogb_labels(label_path, n), origin=str(label_path), num_classes=cfg.num_classes
            )
        if split_dir is not None:
            for s, fname in zip(SPLITS, ("train", "valid", "test")):
                p = _ogb_file(split_dir, f"{fname}.csv.gz", required=False)
                if p is not None:
                    w.write_split(s, _ogb_read_ids(p, "node ids"), origin=str(p))
    return GraphDir.open(out)
