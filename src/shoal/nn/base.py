"""The call signature every shoal model shares, and the aggregation helpers the models use.

A model is a ``torch.nn.Module`` called as ``model(x, blocks)``: ``x`` holds the input
features of ``blocks[0]``'s source nodes, ``blocks`` one :class:`~shoal.sample.Block` per layer
(input layer first), and the result has one row per destination node of ``blocks[-1]``.
For full-graph training pass the same full-graph block for every layer. Any user module with
this signature plugs into the trainer; subclasses of :class:`BlockGNN` additionally support
exact layer-wise inference through :meth:`BlockGNN.layer_forward`.

Aggregations run as sparse-CSR times dense products (``torch.sparse.mm``, with
``reduce="mean"`` for GraphSAGE), which on CPU is several times faster than gathering one
message per edge (docs/measurements.md#training-step); the layers' parameters are those of the
torch_geometric layers they mirror.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from shoal.graph.blocks import Block
from shoal.nn.dropout import dropout, dropout_key, layer_key, relu_dropout

__all__ = [
    "BlockGNN",
    "SumLayer",
    "gcn_adj_t",
    "keyed_dropout",
    "layer_widths",
    "mean_aggregate",
    "mean_by_counts",
    "project_first",
    "sum_aggregate",
]


def project_first(block: Block, in_dim: int, out_dim: int) -> bool:
    """Whether a layer whose aggregation is linear (a weighted sum of its sources' rows)
    costs fewer multiply-adds with its weight (``in_dim -> out_dim``) applied to every source
    row before aggregating (``num_src * in * out + edges * out``) than to every target's
    aggregate after (``edges * in + num_dst * in * out``): before in a full-graph layer whose
    rows shrink, after in a sampled block, whose sources outnumber its targets."""
    e = block.num_edges
    before = block.num_src * in_dim * out_dim + e * out_dim
    after = e * in_dim + block.num_dst * in_dim * out_dim
    return before < after


def mean_aggregate(x_src: torch.Tensor, block: Block) -> torch.Tensor:
    """Mean of each destination's sampled in-neighbours' rows (zero for none).

    On the CPU one ``torch.sparse.mm(..., reduce="mean")``; torch supports that reduction on
    CPU CSR tensors only, so other devices take :func:`mean_by_counts` (the same numbers)."""
    if x_src.device.type == "cpu":
        return torch.sparse.mm(block.adj_t(), x_src, reduce="mean")
    return mean_by_counts(x_src, block)


def mean_by_counts(x_src: torch.Tensor, block: Block) -> torch.Tensor:
    """:func:`mean_aggregate` as a sum divided by each target's in-edge count (at least 1,
    so a target without in-edges stays zero); runs on any device."""
    c = block.cache.get("count_dst_f")
    if c is None:
        c = block.count_dst.to(torch.float32).clamp(min=1.0).unsqueeze(1)
        block.cache["count_dst_f"] = c
    return sum_aggregate(x_src, block) / c


def sum_aggregate(x_src: torch.Tensor, block: Block) -> torch.Tensor:
    """Sum of each destination's sampled in-neighbours' rows."""
    return torch.sparse.mm(block.adj_t(), x_src)


def gcn_adj_t(block: Block) -> tuple[torch.Tensor, torch.Tensor]:
    """GCN's normalised propagation on a (sampled) block, cached on the block.

    Kipf & Welling (ICLR 2017), Eq. 2: ``H' = D^-1/2 (A + I) D^-1/2 H W`` with ``D`` the degree
    of ``A + I``. Edge ``u -> v`` gets ``1 / sqrt((d_u + 1)(d_v + 1))`` using full-graph
    degrees, scaled by ``d_v / s_v`` when only ``s_v`` of ``v``'s ``d_v`` neighbours were sampled
    (an unbiased estimate of the full sum, as in FastGCN/GraphSAGE-style sampling); the self
    loop gets ``1 / (d_v + 1)``. On a full-neighbour block this is exactly PyG's ``GCNConv``.
    Returns ``(adj_t, self_weight)``.
    """
    hit = block.cache.get("gcn")
    if hit is not None:
        return hit
    src, dst = block.edge_index
    deg_hat = block.deg_src + 1.0
    cnt = block.count_dst.to(torch.float32).clamp(min=1.0)
    scale = block.deg_dst / cnt
    inv_sqrt = deg_hat.rsqrt()
    w = inv_sqrt[src] * inv_sqrt[dst] * scale[dst]
    out = (block.weighted_adj_t(w), (1.0 / deg_hat[: block.num_dst]).unsqueeze(1))
    block.cache["gcn"] = out
    return out


@dataclass(frozen=True)
class SumLayer:
    """A layer (eval mode) written as a sum of per-source messages, so it can be computed
    source range by source range: with ``h = pre(x)`` (row-wise; identity when None),
    ``out_v = finish(sum_{u -> v} message(h_u, d_u), h_v, d_v)``, ``d`` the full in-degrees
    (float32 ``(n, 1)``; an edge given twice counts twice).

    ``message(h, d)`` maps rows to ``width`` columns, independently per row;
    ``finish(agg, h_dst, d_dst)`` gives the layer's output rows (activation included).
    ``pre`` narrows the rows once per node (e.g. GraphSAGE's ``[x W_l | x W_r]`` when the
    layer shrinks them), so the previous layer can store ``pre`` of its output instead.
    GraphSAGE-mean, GCN, GIN and SGC layers are of this form; attention (GAT) is not.

    ``linear`` says more: ``message(h, d)`` is ``h[:, :width]`` times ``scale(d)`` row by row
    (1 when ``scale`` is None), so a target can sum its sources' rows as they are stored
    (:mod:`shoal.training.blocked`'s pull) instead of materialising messages.
    """

    message: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    finish: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    width: int
    pre: Callable[[torch.Tensor], torch.Tensor] | None = None
    #: the message is the first ``width`` columns times ``scale(d)`` (default false: opaque)
    linear: bool = False
    #: per-source factor of a linear message, from its ``(n, 1)`` degrees (default None: 1)
    scale: Callable[[torch.Tensor], torch.Tensor] | None = None


class BlockGNN(nn.Module):
    """Base class: a stack of ``num_layers`` message-passing layers with activation and dropout.

    Subclasses implement :meth:`conv` (layer ``l`` on a block, without activation). Dropout
    (probability ``dropout``) is applied to every layer's input, the activation after every
    layer but the last, as in Kipf & Welling's and Veličković et al.'s reference models.
    Inside :func:`keyed_dropout` the masks are keyed by (step key, layer, node id) from the
    blocks' ``node_ids`` (:mod:`shoal.nn.dropout`); otherwise they come from torch's generator.
    GAT's attention dropout (per edge) is never keyed.
    """

    #: The step's dropout key while inside :func:`keyed_dropout`, else None.
    dropout_key: int | None = None

    activation = staticmethod(F.relu)

    def __init__(self, num_layers: int, dropout: float) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.num_layers = num_layers
        self.dropout = dropout

    def conv(self, layer: int, x: torch.Tensor, block: Block) -> torch.Tensor:
        raise NotImplementedError

    def layer_forward(self, layer: int, x: torch.Tensor, block: Block) -> torch.Tensor:
        """Layer ``layer`` on one block: convolution, then (but after the last layer)
        activation and the dropout of the next layer's input; layer 0 also drops its input.

        In evaluation mode this is convolution + activation, the exact layer-wise output.
        """
        if layer == 0:
            x = self._layer_input(x, block)
            x = dropout(x, self._rate(0), self.training, **self.dropout_site(0, block, x.shape[0]))
        h = self.conv(layer, x, block)
        if layer < self.num_layers - 1:
            site = self.dropout_site(layer + 1, block, block.num_dst)
            if self.activation is F.relu:
                h = relu_dropout(h, self.dropout, self.training, **site)
            else:
                h = dropout(self.activation(h), self.dropout, self.training, **site)
        return h

    def _rate(self, slot: int) -> float:
        """The dropout probability of layer ``slot``'s input."""
        return self.dropout

    def _layer_input(self, x: torch.Tensor, block: Block) -> torch.Tensor:
        """Layer 0's input rows before their dropout (``x`` itself)."""
        return x

    def dropout_site(self, slot: int, block: Block, rows: int) -> dict[str, Any]:
        """The keyword arguments of the dropout of layer ``slot``'s input, whose ``rows`` are
        the first ``rows`` sources of ``block``: ``key`` and ``ids`` when keyed, else none."""
        if self.dropout_key is None or not self.training or self._rate(slot) == 0.0:
            return {}
        if block.node_ids is None:
            raise ValueError(
                "keyed dropout needs the node ids of every block (Block.node_ids); "
                "the engine or trainer that entered keyed_dropout did not set them"
            )
        return {"key": layer_key(self.dropout_key, slot), "ids": block.node_ids[:rows]}

    def inference_split(self, layer: int) -> tuple[Callable | None, Callable]:
        """Split layer ``layer`` (eval mode) into a node-wise part and an aggregation part.

        Returns ``(pre, post)``: ``pre(x)`` maps rows independently (None = identity) and
        ``post(h, block)`` finishes the layer (aggregation, activation) from the ``pre`` rows of
        the block's sources, so ``post(pre(x), block) == layer_forward(layer, x, block)``.
        Layer-wise inference runs ``pre`` once per node instead of once per edge, which matters
        when a wide input is projected before aggregation. Default: no split.
        """
        return None, lambda h, block: self.layer_forward(layer, h, block)

    def sum_layer(self, layer: int) -> SumLayer | None:
        """Layer ``layer`` (eval mode) as a :class:`SumLayer`, or None when its aggregation is
        not a sum of messages (the default). Lets inference read each source range once."""
        return None

    def _finish(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        """The activation after layer ``layer`` (none after the last), in eval mode."""
        return self.activation(h) if layer < self.num_layers - 1 else h

    def forward(self, x: torch.Tensor, blocks: Sequence[Block]) -> torch.Tensor:
        if len(blocks) != self.num_layers:
            raise ValueError(f"model has {self.num_layers} layers but got {len(blocks)} blocks")
        for layer, block in enumerate(blocks):
            if x.shape[0] != block.num_src:
                raise ValueError(
                    f"layer {layer}: x has {x.shape[0]} rows, block has {block.num_src} sources"
                )
            x = self.layer_forward(layer, x, block)
        return x

    @staticmethod
    def dims(in_dim: int, hidden: int, out_dim: int, num_layers: int) -> list[tuple[int, int]]:
        sizes = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        return list(zip(sizes[:-1], sizes[1:], strict=True))


@contextmanager
def keyed_dropout(model: nn.Module, seed: int, epoch: int, step: int = 0) -> Iterator[None]:
    """Within the block, every :class:`BlockGNN` in ``model`` draws keyed dropout masks for
    the step (run ``seed``, ``epoch``, ``step``; :func:`~shoal.nn.dropout.dropout_key`): a
    node's mask at a layer depends on its id (``Block.node_ids``, the original numbering)
    and the step only, not on which process computes it or how often. A module that is not a
    BlockGNN is left as it is."""
    key = dropout_key(seed, epoch, step)
    mods = [m for m in model.modules() if isinstance(m, BlockGNN)]
    for m in mods:
        m.dropout_key = key
    try:
        yield
    finally:
        for m in mods:
            m.dropout_key = None


def layer_widths(model: BlockGNN, in_dim: int) -> list[int]:
    """The width of every level of ``model``: its input (``in_dim``), each layer's output
    (GAT's heads included), from a pass over one isolated node in evaluation mode."""
    dev = next((p.device for p in model.parameters()), torch.device("cpu"))
    e = torch.empty((2, 0), dtype=torch.int64)
    blk = Block(e, 1, 1, torch.zeros(2, dtype=torch.int64), torch.ones(1)).to(dev)
    widths, x = [int(in_dim)], torch.zeros(1, in_dim, device=dev)
    was = model.training
    model.eval()
    with torch.no_grad():
        for layer in range(model.num_layers):
            x = model.layer_forward(layer, x, blk)
            widths.append(int(x.shape[1]))
    model.train(was)
    return widths
