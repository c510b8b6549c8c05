"""GCN (Kipf & Welling, "Semi-supervised classification with graph convolutional networks",
ICLR 2017), Eq. 2: ``H' = D^-1/2 (A + I) D^-1/2 H W`` with the normalisation of
:func:`shoal.nn.base.gcn_adj_t` (exact on full neighbourhoods, unbiased when sampled)."""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import GCNConv

from shoal.graph.blocks import Block
from shoal.nn.base import BlockGNN, SumLayer, gcn_adj_t, project_first

__all__ = ["GCN"]


def gcn_propagate(h: torch.Tensor, block: Block) -> torch.Tensor:
    """``D^-1/2 (A + I) D^-1/2 h`` restricted to the block's destination rows."""
    adj, self_w = gcn_adj_t(block)
    return torch.sparse.mm(adj, h) + self_w * h[: block.num_dst]


def gcn_sum_layer(lin, bias, finish_act, project: bool, width: int) -> SumLayer:
    """GCN's propagation as a sum of messages: ``m_u = (d_u + 1)^-1/2 h_u``,
    ``out_v = (d_v + 1)^-1/2 sum_u m_u + h_v / (d_v + 1)`` (the self loop), then ``bias`` and
    ``finish_act``; ``h = lin(x)`` stored per node (``pre``) when ``project``, else ``lin`` is
    applied after the propagation."""

    def scale(d: torch.Tensor) -> torch.Tensor:
        return (d + 1.0).rsqrt()

    def message(h: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        return h * scale(d)

    def finish(agg: torch.Tensor, h_dst: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        h = agg * (d + 1.0).rsqrt() + h_dst / (d + 1.0)
        if not project and lin is not None:
            h = lin(h)
        return finish_act(h + bias if bias is not None else h)

    return SumLayer(message, finish, width, pre=lin if project else None, linear=True, scale=scale)


class GCN(BlockGNN):
    """GCN; parameters are those of ``num_layers`` PyG ``GCNConv`` layers.

    Args (keyword-only): in_dim, hidden, out_dim, num_layers (default 2), dropout (default 0.5).
    """

    def __init__(
        self, *, in_dim: int, hidden: int, out_dim: int, num_layers: int = 2, dropout: float = 0.5
    ) -> None:
        super().__init__(num_layers, dropout)
        self.convs = nn.ModuleList(
            GCNConv(i, o) for i, o in self.dims(in_dim, hidden, out_dim, num_layers)
        )

    def conv(self, layer: int, x: torch.Tensor, block: Block) -> torch.Tensor:
        c = self.convs[layer]
        if project_first(block, c.in_channels, c.out_channels):  # (fewer multiply-adds)
            h = gcn_propagate(c.lin(x), block)
        else:
            h = c.lin(gcn_propagate(x, block))
        return h + c.bias if c.bias is not None else h

    def inference_split(self, layer: int):
        c = self.convs[layer]
        if c.out_channels >= c.in_channels:
            return super().inference_split(layer)

        def post(h: torch.Tensor, block: Block) -> torch.Tensor:
            out = gcn_propagate(h, block)
            return self._finish(layer, out + c.bias if c.bias is not None else out)

        return c.lin, post

    def sum_layer(self, layer: int) -> SumLayer:
        c = self.convs[layer]
        project = c.out_channels < c.in_channels
        width = c.out_channels if project else c.in_channels
        return gcn_sum_layer(c.lin, c.bias, lambda h: self._finish(layer, h), project, width)
