"""GIN (Xu, Hu, Leskovec & Jegelka, "How powerful are graph neural networks?", ICLR 2019),
Eq. 4.1: ``h_v = MLP((1 + eps) h_v + sum_{u in N(v)} h_u)`` with a learnable ``eps`` and a
2-layer MLP per layer, built from PyG ``GINConv``."""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import GINConv

from shoal.graph.blocks import Block
from shoal.nn.base import BlockGNN, SumLayer, sum_aggregate

__all__ = ["GIN"]


class GIN(BlockGNN):
    """GIN; each layer's MLP is Linear-ReLU-Linear.

    Args (keyword-only): in_dim, hidden, out_dim, num_layers (default 2), dropout (default 0.5),
    train_eps (learn eps; default true).
    """

    def __init__(
        self,
        *,
        in_dim: int,
        hidden: int,
        out_dim: int,
        num_layers: int = 2,
        dropout: float = 0.5,
        train_eps: bool = True,
    ) -> None:
        super().__init__(num_layers, dropout)
        self.convs = nn.ModuleList(
            GINConv(
                nn.Sequential(nn.Linear(i, hidden), nn.ReLU(), nn.Linear(hidden, o)),
                train_eps=train_eps,
            )
            for i, o in self.dims(in_dim, hidden, out_dim, num_layers)
        )

    def conv(self, layer: int, x: torch.Tensor, block: Block) -> torch.Tensor:
        c = self.convs[layer]
        return c.nn((1 + c.eps) * x[: block.num_dst] + sum_aggregate(x, block))

    def sum_layer(self, layer: int) -> SumLayer:
        c = self.convs[layer]

        def finish(agg: torch.Tensor, x_dst: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
            return self._finish(layer, c.nn((1 + c.eps) * x_dst + agg))

        return SumLayer(lambda x, d: x, finish, c.nn[0].in_features, linear=True)
