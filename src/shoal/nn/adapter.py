"""Run a model called as ``model(x, edge_index)`` (PyG's convention) on shoal's blocks.

:class:`EdgeIndexModel` turns a batch's blocks (input layer first) into one ``edge_index`` in
PyG's ``NeighborLoader`` layout (local ids, row 0 the message source, hop 1's edges first)
and calls the wrapped module; the result's first ``num_dst`` rows of the last block are the
seeds' outputs. When the module accepts ``num_sampled_nodes_per_hop`` and
``num_sampled_edges_per_hop`` (PyG's ``BasicGNN`` models do), they are passed, so layer ``l``
sees only the hops it needs (``trim_to_layer``): then each layer uses exactly the edges of
shoal's block for it, as shoal's own models do.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from shoal.graph.blocks import Block

__all__ = ["EdgeIndexModel", "blocks_to_edge_index"]


def blocks_to_edge_index(blocks: list[Block]) -> tuple[torch.Tensor, list[int], list[int]]:
    """``(edge_index, nodes per hop, edges per hop)`` of blocks given input layer first."""
    hops = list(reversed(blocks))
    ei = torch.cat([b.edge_index for b in hops], dim=1).long() if hops else torch.empty(2, 0)
    nodes = [hops[0].num_dst] + [b.num_src - b.num_dst for b in hops] if hops else [0]
    return ei, nodes, [int(b.edge_index.shape[1]) for b in hops]


class EdgeIndexModel(nn.Module):
    """Wraps ``module`` (called as ``module(x, edge_index)``) into ``model(x, blocks)``."""

    def __init__(self, module: nn.Module, num_layers: int | None = None) -> None:
        super().__init__()
        self.module = module
        #: message-passing layers (the exact inference expands this many hops)
        self.num_layers = num_layers or getattr(module, "num_layers", None)
        params = inspect.signature(module.forward).parameters
        self.trims = "num_sampled_nodes_per_hop" in params and "num_sampled_edges_per_hop" in params

    def forward(self, x: torch.Tensor, blocks: list[Block]) -> torch.Tensor:
        ei, nodes, edges = blocks_to_edge_index(blocks)
        if self.trims:
            out = self.module(
                x, ei, num_sampled_nodes_per_hop=nodes, num_sampled_edges_per_hop=edges
            )
        else:
            out = self.module(x, ei)
        return out[: blocks[-1].num_dst]
