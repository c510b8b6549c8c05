"""A typed batch in PyG's heterogeneous layout (``x_dict``, ``edge_index_dict``)."""

from __future__ import annotations

import torch

from shoal.data.hetero import HeteroSchema
from shoal.graph.blocks import Block
from shoal.nn.hetero_adapter import HeteroEdgeIndexModel, typed_dicts

SCHEMA = HeteroSchema.of(
    {"paper": 10, "author": 10},
    [("paper", "cites", "paper"), ("author", "writes", "paper"), ("paper", "rev_writes", "author")],
    target="paper",
)


def _block(src, dst, num_src, num_dst) -> Block:
    ei = torch.tensor([src, dst], dtype=torch.int64)
    rowptr = torch.zeros(num_dst + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(torch.bincount(ei[1], minlength=num_dst), 0)
    return Block(ei, num_src, num_dst, rowptr, torch.ones(num_src))


def _batch():
    """Batch nodes 0..5: types paper, paper, author, paper, author, author; seeds 0, 1.
    Hop 1 (targets 0, 1): 2->0 writes, 3->0 cites, 4->1 writes.
    Hop 2 (targets 0..4): 5->3 writes, 0->2 rev_writes, 1->4 rev_writes."""
    node_type = torch.tensor([0, 0, 1, 0, 1, 1])
    hop1 = _block([2, 3, 4], [0, 0, 1], 5, 2)
    hop2 = _block([0, 5, 1], [2, 3, 4], 6, 5)
    return node_type, [hop2, hop1], [torch.tensor([2, 1, 2]), torch.tensor([1, 0, 1])]


def test_typed_batch_becomes_per_type_rows_and_per_relation_edges():
    node_type, blocks, rels = _batch()
    h = torch.arange(6, dtype=torch.float32)[:, None]
    x, ei = typed_dicts(SCHEMA, h, node_type, blocks, rels)
    assert x["paper"].flatten().tolist() == [0, 1, 3]  # batch order: seeds first
    assert x["author"].flatten().tolist() == [2, 4, 5]
    assert set(ei) == {e.key for e in SCHEMA.edge_types}
    # positions among each type's rows; hop 1's edges first
    assert ei[("paper", "cites", "paper")].tolist() == [[2], [0]]
    assert ei[("author", "writes", "paper")].tolist() == [[0, 1, 2], [0, 1, 2]]
    assert ei[("paper", "rev_writes", "author")].tolist() == [[0, 1], [0, 1]]


def test_the_wrapped_module_gives_the_seeds_rows_of_the_target_type():
    class Echo(torch.nn.Module):
        def forward(self, x_dict, edge_index_dict):
            return {k: v * 10 for k, v in x_dict.items()}

    node_type, blocks, rels = _batch()
    h = torch.arange(6, dtype=torch.float32)[:, None]
    out = HeteroEdgeIndexModel(Echo(), SCHEMA, 2)(h, blocks, rels, node_type)
    assert out.flatten().tolist() == [0.0, 10.0]


def test_an_empty_relation_has_an_empty_edge_index():
    node_type = torch.tensor([0, 1])
    blk = _block([1], [0], 2, 1)
    x, ei = typed_dicts(SCHEMA, torch.zeros(2, 3), node_type, [blk], [torch.tensor([1])])
    assert ei[("paper", "cites", "paper")].shape == (2, 0)
    assert x["author"].shape == (1, 3)
