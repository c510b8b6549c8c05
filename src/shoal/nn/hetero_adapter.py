"""Run a heterogeneous model called as ``model(x_dict, edge_index_dict)`` (PyG's convention
for ``to_hetero`` and ``HeteroConv`` models) on shoal's typed blocks.

:class:`HeteroEdgeIndexModel` turns a typed batch (its nodes' types, its blocks given input
layer first, each edge's relation) into PyG's heterogeneous mini-batch layout, as a
``NeighborLoader`` over ``HeteroData`` gives it: per node type the rows of the batch's nodes
of that type (batch order, so the seeds come first among the target type's), and per
canonical edge type ``(src, relation, dst)`` an ``edge_index`` over those per-type positions
(row 0 the message source), the edges of every hop together, hop 1's first. The wrapped
module's output for the target type (a tensor, or a dict keyed by node type) gives the seeds'
rows, its first ``num_seeds``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from shoal.data.hetero import HeteroSchema
from shoal.graph.blocks import Block

__all__ = ["HeteroEdgeIndexModel", "typed_dicts"]


def typed_dicts(
    schema: HeteroSchema,
    h: torch.Tensor,
    node_type: torch.Tensor,
    blocks: list[Block],
    edge_types: list[torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[tuple[str, str, str], torch.Tensor]]:
    """``(x_dict, edge_index_dict)`` of a typed batch: ``h`` one row per batch node,
    ``node_type`` their types, ``blocks`` input layer first with ``edge_types`` their edges'
    relations. Every node type and every relation has an entry (maybe empty), as PyG's
    loaders give them."""
    kind = node_type.numpy()
    pos = np.zeros(len(kind), np.int64)  # a batch node's position among its type's
    x_dict: dict[str, torch.Tensor] = {}
    for t, nt in enumerate(schema.node_types):
        on = np.flatnonzero(kind == t)
        pos[on] = np.arange(len(on))
        x_dict[nt.name] = h[torch.from_numpy(on)]
    hops = list(reversed(list(zip(blocks, edge_types, strict=True))))  # hop 1 first
    if hops:
        ei = torch.cat([b.edge_index for b, _ in hops], dim=1).long().numpy()
        rel = torch.cat([et for _, et in hops]).numpy()
    else:
        ei, rel = np.empty((2, 0), np.int64), np.empty(0, np.int64)
    order = np.argsort(rel, kind="stable")  # each relation's edges, hop order kept
    bounds = np.searchsorted(rel[order], np.arange(len(schema.edge_types) + 1))
    edge_index_dict = {}
    for r, et in enumerate(schema.edge_types):
        sel = order[bounds[r] : bounds[r + 1]]
        edge_index_dict[et.key] = torch.from_numpy(np.stack([pos[ei[0, sel]], pos[ei[1, sel]]]))
    return x_dict, edge_index_dict


class HeteroEdgeIndexModel(nn.Module):
    """Wraps ``module`` (called as ``module(x_dict, edge_index_dict)``) into the relational
    layers of :class:`~shoal.training.typed.TypedModel`: ``forward(h, blocks, edge_types,
    node_type)`` returns the seeds' rows (the first ``blocks[-1].num_dst`` nodes, all of the
    target type)."""

    def __init__(self, module: nn.Module, schema: HeteroSchema, num_layers: int) -> None:
        super().__init__()
        if schema.target is None:
            raise ValueError("the schema names no target type")
        self.module, self.schema, self.num_layers = module, schema, int(num_layers)

    def forward(
        self,
        h: torch.Tensor,
        blocks: list[Block],
        edge_types: list[torch.Tensor],
        node_type: torch.Tensor,
    ) -> torch.Tensor:
        x_dict, edge_index_dict = typed_dicts(self.schema, h, node_type, blocks, edge_types)
        out = self.module(x_dict, edge_index_dict)
        if isinstance(out, dict):
            out = out[self.schema.target]
        return out[: blocks[-1].num_dst if blocks else 0]
