"""A typed graph as an untyped one: :func:`flatten` (``shoal data flatten``).

The baseline a relational model is measured against (issue 34: R-GCN and R-GAT must beat a
homogeneous GraphSAGE "on the flattened graph"), and a way to run the untyped pipeline
(stores, engines) on a typed graph while it cannot read types: the same global ids and
edges, every node type's features stacked into one ``features.npy`` (types of another width
are zero-padded to the widest, a type without features gets zero rows), the target type's
labels and splits as they are. Relations and types are dropped. Streamed: features are
copied type by type in blocks, edges chunk by chunk.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from shoal.data.format import SPLITS, GraphDir, GraphWriter
from shoal.errors import ShoalInputError

__all__ = ["flatten"]

_ROWS = 1 << 15


def _stacked(g: GraphDir, width: int) -> Iterator[np.ndarray]:
    """Every type's feature rows in id order, zero-padded to ``width`` columns."""
    for t in g.schema.node_types:
        x = g.node_features(t.name)
        for a in range(0, int(t.count), _ROWS):
            b = min(a + _ROWS, int(t.count))
            block = np.zeros((b - a, width), np.float32)
            if x is not None:
                block[:, : x.shape[1]] = x[a:b]
            yield block


def flatten(
    graph: GraphDir | str | os.PathLike,
    out: str | os.PathLike,
    *,
    overwrite: bool = False,
    name: str | None = None,
) -> GraphDir:
    """Write the untyped graph directory of the typed ``graph`` (module docstring)."""
    g = graph if isinstance(graph, GraphDir) else GraphDir.open(graph)
    if g.schema is None:
        raise ShoalInputError(
            "not a typed graph: nothing to flatten", path=g.path, fix="use it as it is"
        )
    width = max((t.feature_dim or 0 for t in g.schema.node_types), default=0)
    source = {"input": str(g.path), "importer": "flatten", "options": {"feature_width": width}}
    with GraphWriter(
        out,
        num_nodes=g.num_nodes,
        directed=g.directed,
        name=name or f"{g.name}-flat",
        source=source,
        overwrite=overwrite,
    ) as w:
        for chunk in g.edge_stream():
            w.add_edges(chunk, origin=str(g.path / "edges.bin"))
        w.finish_edges()
        if width:
            w.write_features(_stacked(g, width), origin=f"{g.path} (features by type)")
        y = g.labels()
        if y is not None:
            w.write_labels(
                np.asarray(y), origin=str(g.path / "labels.npy"), num_classes=g.num_classes
            )
        for s in SPLITS:
            idx = g.split(s)
            if idx is not None:
                w.write_split(s, np.asarray(idx), origin=str(g.path / f"{s}_idx.npy"))
    return GraphDir.open(out)
