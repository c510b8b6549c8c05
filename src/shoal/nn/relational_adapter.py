"""Run a heterogeneous PyG model, called ``module(x_dict, edge_index_dict)`` (the convention
of ``to_hetero`` and ``HeteroConv`` models), as ``model(x, blocks)`` on a typed batch.

:class:`RelationalEdgeIndexModel` is the typed twin of :class:`~shoal.nn.adapter.EdgeIndexModel`:
``x`` follows the relational models' input contract (:mod:`shoal.nn.relational`: one row per
source of ``blocks[0]``, a type's features in its first ``F_t`` columns) and goes through the
same per-type input stage (:class:`~shoal.nn.relational.RelationalInput`, every type then
``hidden`` wide); the blocks (input layer first, carrying ``edge_type``, ``src_type`` and,
for a featureless type, ``node_ids``) become PyG's heterogeneous ``NeighborLoader`` layout
(:func:`hetero_inputs`): per node type the rows of the batch's nodes of that type in batch
order (seeds first, then each hop's new nodes), per canonical edge type ``(src, relation,
dst)`` an ``edge_index`` over those per-type positions (row 0 the message source), hop 1's
edges first. As in PyG's layout each node's in-edges come from one hop, the one after the
node first appears (shoal's sampler draws the known nodes again at every hop; those repeat
draws are left out), so a node within ``num_layers - 1`` hops of a seed has its sampled
in-edges exactly once: with every neighbour sampled, the seeds' outputs are those of the
model on the whole graph, whatever the batch's other seeds.

When the module's ``forward`` takes ``num_sampled_nodes_dict`` and
``num_sampled_edges_dict`` (the MLPerf R-GAT reference's ``RGNN`` does, for PyG's
``trim_to_layer``), each type's nodes per hop and each relation's edges per hop are passed.
The module's output for the target type (a tensor, or a dict keyed by node type) gives the
seeds' rows, its first ``blocks[-1].num_dst``. Not a :class:`~shoal.nn.base.BlockGNN`: no
layer-wise inference, no keyed dropout (the module's own dropout draws from torch's
generator).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from shoal.data.hetero import HeteroSchema
from shoal.graph.blocks import Block
from shoal.nn.relational import RelationalInput

__all__ = ["HeteroInputs", "RelationalEdgeIndexModel", "hetero_inputs"]


@dataclass
class HeteroInputs:
    """A typed batch in PyG's heterogeneous layout (module docstring)."""

    x_dict: dict[str, torch.Tensor]
    edge_index_dict: dict[tuple[str, str, str], torch.Tensor]
    #: per node type, its nodes of each hop (hop 0: the seeds), ``num_layers + 1`` entries
    num_sampled_nodes_dict: dict[str, list[int]]
    #: per edge type, its edges of each hop (hop 1 first), ``num_layers`` entries
    num_sampled_edges_dict: dict[tuple[str, str, str], list[int]]


def _check_typed(blocks: Sequence[Block]) -> None:
    for i, b in enumerate(blocks):
        missing = [
            name
            for name, v in (("edge_type", b.edge_type), ("src_type", b.src_type))
            if v is None and (b.num_edges or name == "src_type")
        ]
        if missing:
            raise ValueError(
                f"block {i} has no {' or '.join(missing)}: a relational model needs typed "
                "blocks (a typed graph's sampler sets them)"
            )


def hetero_inputs(schema: HeteroSchema, h: torch.Tensor, blocks: Sequence[Block]) -> HeteroInputs:
    """``h`` (one row per source of ``blocks[0]``) and the typed ``blocks`` (input layer
    first) in PyG's heterogeneous layout (module docstring). Every node type and every
    relation has an entry, maybe empty, as PyG's loaders give them."""
    if not blocks:
        raise ValueError("a batch needs at least one block")
    _check_typed(blocks)
    node_type = blocks[0].src_type[: blocks[0].num_src]
    dev = node_type.device
    n = int(node_type.shape[0])
    if h.shape[0] != n:
        raise ValueError(f"h has {h.shape[0]} rows, blocks[0] has {n} sources")
    hops = list(reversed(blocks))  # hop 1 first
    # nodes of hop k: [bounds[k], bounds[k + 1]); hop k's block's targets: [0, bounds[k])
    bounds = [0, hops[0].num_dst] + [b.num_src for b in hops]
    pos = torch.empty(n, dtype=torch.int64, device=dev)  # position among its type's rows
    hop_of = torch.empty(n, dtype=torch.int64, device=dev)
    for k in range(len(hops) + 1):
        hop_of[bounds[k] : bounds[k + 1]] = k
    names = [t.name for t in schema.node_types]
    x_dict: dict[str, torch.Tensor] = {}
    nodes: dict[str, list[int]] = {}
    for t, name in enumerate(names):
        on = (node_type == t).nonzero().squeeze(1)
        pos[on] = torch.arange(len(on), device=dev)
        x_dict[name] = h[on]
        nodes[name] = torch.bincount(hop_of[on], minlength=len(hops) + 1).tolist()
    eis, rels, hop_ids = [], [], []
    for k, b in enumerate(hops, start=1):
        # PyG's layout: hop k's edges into the nodes new at hop k - 1 only
        keep = b.edge_index[1] >= bounds[k - 1]
        eis.append(b.edge_index[:, keep].to(dev))
        et = b.edge_type if b.edge_type is not None else b.edge_index.new_empty(0)
        rels.append(et[keep].to(dev))
        hop_ids.append(torch.full((int(keep.sum()),), k - 1, dtype=torch.int64, device=dev))
    ei, rel, hop = torch.cat(eis, dim=1), torch.cat(rels), torch.cat(hop_ids)
    R, L = len(schema.edge_types), len(hops)
    if rel.numel() and (int(rel.min()) < 0 or int(rel.max()) >= R):
        raise ValueError(f"edge types must lie in [0, {R}) (the schema's relations)")
    rel, order = torch.sort(rel, stable=True)  # each relation's edges, hop order kept
    ei, hop = ei[:, order], hop[order]
    per = torch.bincount(rel * L + hop, minlength=R * L).view(R, L).tolist()
    edge_index_dict: dict[tuple[str, str, str], torch.Tensor] = {}
    edges: dict[tuple[str, str, str], list[int]] = {}
    at = 0
    for r, et in enumerate(schema.edge_types):
        m = sum(per[r])
        sel = ei[:, at : at + m]
        at += m
        edge_index_dict[et.key] = torch.stack([pos[sel[0]], pos[sel[1]]])
        edges[et.key] = per[r]
    return HeteroInputs(x_dict, edge_index_dict, nodes, edges)


class RelationalEdgeIndexModel(nn.Module):
    """Wraps ``module`` (called ``module(x_dict, edge_index_dict)``, e.g. a ``to_hetero``'d
    PyG model or a ``HeteroConv`` stack) into ``model(x, blocks)`` on typed blocks (module
    docstring); returns the seeds' rows (all of ``schema.target``'s type).

    Args:
        module: the heterogeneous model; its node types and relations are ``schema``'s.
        schema: the typed graph's node types (names, counts, feature widths, id offsets),
            relations and target type.
        hidden (keyword): the per-type input stage's width, every type's rows in ``x_dict``.
        num_layers (keyword): the module's message-passing layers (the hops exact inference
            and samplers expand; default the module's ``num_layers`` attribute).
        given (keyword): featureless types whose rows come in ``x``'s first ``hidden``
            columns (default none); project_inputs (keyword, default True):
            :class:`~shoal.nn.relational.RelationalInput`'s ``project``.
    """

    def __init__(
        self,
        module: nn.Module,
        schema: HeteroSchema,
        *,
        hidden: int,
        num_layers: int | None = None,
        given: Sequence[bool] | None = None,
        project_inputs: bool = True,
    ) -> None:
        super().__init__()
        if schema.target is None:
            raise ValueError("the schema names no target type")
        layers = num_layers if num_layers is not None else getattr(module, "num_layers", None)
        if layers is None or int(layers) < 1:
            raise ValueError("num_layers: give the module's number of message-passing layers")
        self.module, self.schema, self.num_layers = module, schema, int(layers)
        self.target = schema.type_index(schema.target)
        self.input = RelationalInput(
            [t.feature_dim for t in schema.node_types],
            [t.count for t in schema.node_types],
            schema.offsets,
            hidden,
            given=given,
            project=project_inputs,
        )
        params = inspect.signature(module.forward).parameters
        self.trims = "num_sampled_nodes_dict" in params and "num_sampled_edges_dict" in params

    def forward(self, x: torch.Tensor, blocks: Sequence[Block]) -> torch.Tensor:
        if len(blocks) != self.num_layers:
            raise ValueError(f"model has {self.num_layers} layers but got {len(blocks)} blocks")
        _check_typed(blocks)
        b0 = blocks[0]
        if x.shape[0] != b0.num_src:
            raise ValueError(f"x has {x.shape[0]} rows, blocks[0] has {b0.num_src} sources")
        seeds = blocks[-1].num_dst
        if seeds and bool((b0.src_type[:seeds] != self.target).any()):
            raise ValueError(f"every seed must be of the target type {self.schema.target!r}")
        h = self.input(x, b0.src_type[: b0.num_src], b0.node_ids)
        hb = hetero_inputs(self.schema, h, blocks)
        if self.trims:
            out = self.module(
                hb.x_dict,
                hb.edge_index_dict,
                num_sampled_nodes_dict=hb.num_sampled_nodes_dict,
                num_sampled_edges_dict=hb.num_sampled_edges_dict,
            )
        else:
            out = self.module(hb.x_dict, hb.edge_index_dict)
        if isinstance(out, dict):
            out = out[self.schema.target]
        return out[:seeds]
