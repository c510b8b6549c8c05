"""PyG ``HeteroData`` in and out of a typed graph directory: :func:`from_hetero_data`,
:func:`to_hetero_data` (for graphs that fit in memory; ``docs/format.md``, typed graphs)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from shoal.data.format import GraphDir
from shoal.data.hetero import HeteroSchema
from shoal.data.hetero_writer import HeteroGraphWriter
from shoal.errors import ShoalInputError

__all__ = ["from_hetero_data", "to_hetero_data"]

_MASKS = {"train": "train_mask", "val": "val_mask", "test": "test_mask"}


def _np(t: Any) -> np.ndarray | None:
    if t is None:
        return None
    return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)


def from_hetero_data(
    data: Any,
    out: str | os.PathLike,
    *,
    target: str | None = None,
    add_reverse: bool = False,
    name: str | None = None,
    overwrite: bool = False,
) -> GraphDir:
    """Write a PyG ``HeteroData`` as a typed graph directory: every node type (its
    ``num_nodes``, ``x`` when present), every edge type's ``edge_index`` (type-local ids, as
    PyG stores them), the labels ``y`` and ``train_mask``/``val_mask``/``test_mask`` of the
    ``target`` type (default: the one node type that has ``y``). Types keep PyG's order."""
    node_types = list(data.node_types)
    if not node_types:
        raise ShoalInputError("the HeteroData object has no node types", path="from_hetero_data")
    counts = {}
    for t in node_types:
        n = data[t].num_nodes
        if n is None:
            raise ShoalInputError(
                f"node type {t!r} has no num_nodes (and no x)",
                path="from_hetero_data",
                fix=f"set data[{t!r}].num_nodes",
            )
        counts[t] = int(n)
    if target is None:
        labelled = [t for t in node_types if getattr(data[t], "y", None) is not None]
        target = labelled[0] if len(labelled) == 1 else None
    schema = HeteroSchema.of(counts, [tuple(k) for k in data.edge_types], target=target)
    with HeteroGraphWriter(
        out,
        schema,
        add_reverse=add_reverse,
        name=name,
        source={"input": "torch_geometric.data.HeteroData", "importer": "pyg-hetero"},
        overwrite=overwrite,
    ) as w:
        for key in data.edge_types:
            ei = _np(data[key].edge_index)  # (2, E): passed as rows, never ambiguous
            w.add_relation(tuple(key), ei.T, origin=f"HeteroData[{key}].edge_index")
        w.finish_edges()
        for t in node_types:
            x = _np(getattr(data[t], "x", None))
            if x is not None:
                w.write_node_features(t, x, origin=f"HeteroData[{t!r}].x")
        if target is not None:
            y = _np(getattr(data[target], "y", None))
            if y is not None:
                w.write_labels(y, origin=f"HeteroData[{target!r}].y")
            for s, attr in _MASKS.items():
                m = _np(getattr(data[target], attr, None))
                if m is not None:
                    w.write_split(s, m, origin=f"HeteroData[{target!r}].{attr}")
    return GraphDir.open(out)


def to_hetero_data(g: GraphDir) -> Any:
    """The typed graph directory ``g`` as a PyG ``HeteroData`` (in memory): per node type
    ``num_nodes`` and ``x``; per edge type ``edge_index`` in type-local ids; the target
    type's ``y`` and split masks."""
    import torch
    from torch_geometric.data import HeteroData

    s = g.schema
    if s is None:
        raise ShoalInputError(
            "not a typed graph", path=g.path, fix="use from_pyg/Data for an untyped graph"
        )
    data = HeteroData()
    for t in s.node_types:
        data[t.name].num_nodes = int(t.count)
        x = g.node_features(t.name)
        if x is not None:
            data[t.name].x = torch.from_numpy(np.array(x, dtype=np.float32))
    edges = np.concatenate(list(g.edge_stream())) if g.num_edges else np.empty((0, 2), np.int64)
    rel = np.asarray(g.relations())
    for i, e in enumerate(s.edge_types):
        on = edges[rel == i].astype(np.int64)
        local = on - [s.node_type(e.src).offset, s.node_type(e.dst).offset]
        data[e.key].edge_index = torch.from_numpy(np.ascontiguousarray(local.T))
    if s.target is not None:
        t = s.node_type(s.target)
        y = g.labels()
        if y is not None:
            data[t.name].y = torch.from_numpy(np.array(y[t.offset : t.offset + t.count]))
        for split, attr in _MASKS.items():
            idx = g.split(split)
            if idx is not None:
                mask = torch.zeros(int(t.count), dtype=torch.bool)
                mask[torch.from_numpy(np.asarray(idx, np.int64) - t.offset)] = True
                data[t.name][attr] = mask
    return data
