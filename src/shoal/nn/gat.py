"""GAT (Veličković et al., "Graph attention networks", ICLR 2018), Eqs. 1-5: multi-head
attention over each node's neighbourhood plus itself; hidden heads are concatenated (Eq. 5),
the output layer averages its heads (Eq. 6). Built from PyG ``GATConv`` on bipartite
``(x_src, x_dst)`` pairs (self loops are added for the destination nodes, which are the first
``num_dst`` sources). On the CPU a layer's messages are summed without a row per edge, its
rows and both attention scores from one product with the attention vectors folded into the
weight (:func:`shoal.nn.attention.attend_projected`: the same numbers, with ``GATConv``'s
parameters)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch_geometric.nn import GATConv

from shoal.graph.blocks import Block
from shoal.nn.attention import attend_projected
from shoal.nn.base import BlockGNN

__all__ = ["GAT"]


class GAT(BlockGNN):
    """Multi-head GAT with ELU activations.

    Args (keyword-only): in_dim, hidden (total width of a hidden layer, split over ``heads``),
    out_dim, num_layers (default 2), dropout (default 0.6, also used as attention dropout),
    heads (default 8), out_heads (heads of the output layer, averaged; default 1).
    """

    activation = staticmethod(F.elu)

    def __init__(
        self,
        *,
        in_dim: int,
        hidden: int,
        out_dim: int,
        num_layers: int = 2,
        dropout: float = 0.6,
        heads: int = 8,
        out_heads: int = 1,
    ) -> None:
        super().__init__(num_layers, dropout)
        if heads < 1 or out_heads < 1:
            raise ValueError("heads and out_heads must be >= 1")
        if hidden % heads:
            raise ValueError(f"hidden={hidden} must be divisible by heads={heads}")
        convs = []
        for i, (a, b) in enumerate(self.dims(in_dim, hidden, out_dim, num_layers)):
            if i < num_layers - 1:
                convs.append(GATConv(a, b // heads, heads=heads, dropout=dropout))
            else:
                convs.append(GATConv(a, b, heads=out_heads, concat=False, dropout=dropout))
        self.convs = nn.ModuleList(convs)

    def conv(self, layer: int, x: torch.Tensor, block: Block) -> torch.Tensor:
        c = self.convs[layer]
        if x.device.type != "cpu" or not _fusable(c):  # PyG's per-edge messages
            return c((x, x[: block.num_dst]), block.edge_index)
        heads, ch = c.heads, c.out_channels
        # one product gives the rows and both scores: <x W_k, a_k> as x <W_k, a_k>, the
        # attention vectors folded into the weight (2 heads more columns, not a product and a
        # sum over every row's channels)
        w = c.lin.weight.view(heads, ch, -1)
        fold_src = (w * c.att_src.view(heads, ch, 1)).sum(1)
        fold_dst = (w * c.att_dst.view(heads, ch, 1)).sum(1)
        y = x @ torch.cat([c.lin.weight, fold_src, fold_dst]).t()
        out = attend_projected(
            y,
            heads,
            ch,
            block,
            negative_slope=c.negative_slope,
            dropout=c.dropout,
            training=self.training,
        )
        out = out.reshape(block.num_dst, heads * ch) if c.concat else out.mean(dim=1)
        return out + c.bias if c.bias is not None else out


def _fusable(c: GATConv) -> bool:
    """Whether :func:`~shoal.nn.attention.attend_projected` computes ``c`` (the GAT's own
    layers: one shared weight, self loops, no edge features or residual)."""
    return (
        getattr(c, "lin", None) is not None
        and getattr(c, "res", None) is None
        and getattr(c, "lin_edge", None) is None
        and c.add_self_loops
    )
