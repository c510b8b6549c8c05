"""Block / MiniBatch: the shared sampled-subgraph types (device moves)."""

from __future__ import annotations

import numpy as np
import torch

from shoal.graph import Block, MiniBatch, full_graph_block


def test_block_to_device_moves_every_tensor_and_keeps_the_structure():
    # 0 <- 1, 0 <- 2, 1 <- 2
    b = full_graph_block(np.array([0, 2, 3, 3]), np.array([1, 2, 2]))
    assert b.to("cpu") is b  # already there: no copy
    m = b.to("meta")
    assert isinstance(m, Block) and m is not b
    assert {m.edge_index.device.type, m.rowptr.device.type, m.deg_src.device.type} == {"meta"}
    assert (m.num_src, m.num_dst, m.num_edges) == (3, 3, 3)
    assert b.edge_index.device.type == "cpu"  # the original is untouched
    assert torch.equal(b.count_dst, torch.tensor([2, 1, 0]))


def test_minibatch_to_device_keeps_host_ids():
    b = full_graph_block(np.array([0, 1, 1]), np.array([1]))
    mb = MiniBatch(n_id=np.array([7, 3]), blocks=[b, b], num_seeds=1)
    moved = mb.to("meta")
    assert all(x.edge_index.device.type == "meta" for x in moved.blocks)
    assert moved.n_id is mb.n_id and moved.seeds.tolist() == [7]
