"""GraphSAGE with mean aggregation (Hamilton, Ying & Leskovec, NeurIPS 2017).

Layer (Algorithm 1, lines 4-5, with the "mean" aggregator of Sec. 3.3 and separate self and
neighbour weights as in PyG's ``SAGEConv``): ``h_v = W_r x_v + W_l mean_{u in N(v)} x_u + b``.
Because the mean is linear, ``W_l`` may be applied before aggregating or after; a block takes
the order with fewer multiply-adds (:func:`shoal.nn.base.project_first`): before (``num_src * in * out +
edges * out``) when the sources are few beside the edges, as in a full-graph layer whose rows
shrink; after (``edges * in + num_dst * in * out``) in a sampled block, whose sources outnumber
its targets (2 layers, fanouts 10,5, 256-d input: a quarter of the first layer's work).
"""

from __future__ import annotations

import torch
from torch import nn
from torch_geometric.nn import SAGEConv

from shoal.graph.blocks import Block
from shoal.nn.base import BlockGNN, SumLayer, mean_aggregate, project_first

__all__ = ["GraphSAGE"]


class GraphSAGE(BlockGNN):
    """GraphSAGE-mean; parameters are those of ``num_layers`` PyG ``SAGEConv`` layers.

    Args (keyword-only): in_dim, hidden, out_dim, num_layers (default 2), dropout (default 0.5).
    """

    def __init__(
        self, *, in_dim: int, hidden: int, out_dim: int, num_layers: int = 2, dropout: float = 0.5
    ) -> None:
        super().__init__(num_layers, dropout)
        self.convs = nn.ModuleList(
            SAGEConv(i, o, aggr="mean") for i, o in self.dims(in_dim, hidden, out_dim, num_layers)
        )

    def conv(self, layer: int, x: torch.Tensor, block: Block) -> torch.Tensor:
        c = self.convs[layer]
        x_dst = x[: block.num_dst]
        if project_first(block, c.in_channels, c.out_channels):
            h = mean_aggregate(x @ c.lin_l.weight.t(), block)
            if c.lin_l.bias is not None:
                h = h + c.lin_l.bias
        else:
            h = c.lin_l(mean_aggregate(x, block))
        return torch.addmm(h, x_dst, c.lin_r.weight.t())  # h + lin_r(x_dst), one pass

    def inference_split(self, layer: int):
        c = self.convs[layer]
        if c.out_channels >= c.in_channels:
            return super().inference_split(layer)
        o = c.out_channels
        w = torch.cat([c.lin_l.weight, c.lin_r.weight]).t()

        def pre(x: torch.Tensor) -> torch.Tensor:
            return x @ w  # [x W_l^T | x W_r^T]

        def post(h: torch.Tensor, block: Block) -> torch.Tensor:
            out = mean_aggregate(h[:, :o].contiguous(), block) + h[: block.num_dst, o:]
            if c.lin_l.bias is not None:
                out = out + c.lin_l.bias
            return self._finish(layer, out)

        return pre, post

    def sum_layer(self, layer: int) -> SumLayer:
        """``W_r x_v + W_l (sum_u x_u) / d_v + b`` (mean over the ``d_v`` in-edges; 0 without).
        When the layer shrinks rows, ``pre`` stores ``[x W_l^T | x W_r^T]`` per node."""
        c = self.convs[layer]
        o = c.out_channels
        b = c.lin_l.bias
        if o < c.in_channels:
            w = torch.cat([c.lin_l.weight, c.lin_r.weight]).t()

            def finish_p(agg: torch.Tensor, h_dst: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
                h = agg / d.clamp(min=1.0) + h_dst[:, o:]
                return self._finish(layer, h + b if b is not None else h)

            return SumLayer(lambda h, d: h[:, :o], finish_p, o, pre=lambda x: x @ w, linear=True)

        def finish(agg: torch.Tensor, x_dst: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
            h = (agg / d.clamp(min=1.0)) @ c.lin_l.weight.t()
            h = h + b if b is not None else h
            return self._finish(layer, torch.addmm(h, x_dst, c.lin_r.weight.t()))

        return SumLayer(lambda x, d: x, finish, c.in_channels, linear=True)
