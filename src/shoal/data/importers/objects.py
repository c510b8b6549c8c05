"""Importers of in-memory Python objects: a PyG ``Data`` (:func:`from_pyg`) or a scipy sparse
adjacency matrix (:func:`from_scipy`), for small graphs."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from shoal.data.format import SPLITS, GraphDir
from shoal.data.importers.common import (
    ImportConfig,
    add_edge_index,
    make_writer,
    with_num_nodes,
)
from shoal.errors import ShoalInputError

__all__ = ["from_pyg", "from_scipy"]


def _to_numpy(t: Any) -> np.ndarray:
    if t is None:
        return None  # type: ignore[return-value]
    if hasattr(t, "detach"):
        return t.detach().cpu().numpy()
    return np.asarray(t)


def from_pyg(
    data: Any, out: str | os.PathLike, config: ImportConfig | None = None, **options: Any
) -> GraphDir:
    """Write a PyG ``Data`` object (``edge_index``, optional ``x``, ``y``, ``train_mask``,
    ``val_mask``, ``test_mask``, ``num_nodes``) as a graph directory.

    The object is in memory already, so this is meant for small graphs; edges are still written
    in chunks. ``options`` are :class:`ImportConfig` fields (used when ``config`` is None).
    """
    cfg = config or ImportConfig(**options)
    ei = _to_numpy(getattr(data, "edge_index", None))
    if ei is None:
        raise ShoalInputError("the Data object has no edge_index", path="from_pyg")
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ShoalInputError(f"edge_index has shape {ei.shape}, expected (2, E)", path="from_pyg")
    n = cfg.num_nodes
    if n is None and getattr(data, "num_nodes", None) is not None:
        n = int(data.num_nodes)
    wcfg = with_num_nodes(cfg, n)
    with make_writer(out, wcfg, {"input": "torch_geometric.data.Data", "importer": "pyg"}) as w:
        add_edge_index(w, ei, "Data.edge_index", cfg.chunk_edges)
        w.finish_edges()
        x = _to_numpy(getattr(data, "x", None))
        if x is not None:
            w.write_features(x, origin="Data.x")
        y = _to_numpy(getattr(data, "y", None))
        if y is not None:
            w.write_labels(y, origin="Data.y", num_classes=cfg.num_classes)
        for s in SPLITS:
            m = _to_numpy(getattr(data, f"{s}_mask", None))
            if m is not None:
                w.write_split(s, m, origin=f"Data.{s}_mask")
    return GraphDir.open(out)


def from_scipy(
    matrix: Any, out: str | os.PathLike, config: ImportConfig | None = None, **options: Any
) -> GraphDir:
    """Write a square scipy sparse adjacency matrix as a graph directory.

    Entry ``(i, j)`` becomes the edge ``i -> j`` (values are ignored; explicit zeros count as
    edges). ``num_nodes`` is the matrix size. For small graphs (the matrix is in memory).
    """
    import scipy.sparse as sp

    if not sp.issparse(matrix):
        raise ShoalInputError(
            f"expected a scipy sparse matrix, got {type(matrix).__name__}", path="from_scipy"
        )
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ShoalInputError(
            f"adjacency matrix must be square, got shape {matrix.shape}", path="from_scipy"
        )
    cfg = config or ImportConfig(**options)
    coo = matrix.tocoo()
    n = cfg.num_nodes if cfg.num_nodes is not None else int(matrix.shape[0])
    wcfg = with_num_nodes(cfg, n)
    with make_writer(out, wcfg, {"input": "scipy.sparse", "importer": "scipy"}) as w:
        add_edge_index(w, np.vstack([coo.row, coo.col]), "matrix", cfg.chunk_edges)
    return GraphDir.open(out)
