"""Keyed dropout: a row's mask is a function of (key, node id) only; the torch mask equals the
numba kernel's; a model inside ``keyed_dropout`` gives a node the same mask in any block."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.graph.blocks import Block, full_graph_block
from shoal.nn import build_model
from shoal.nn.base import keyed_dropout
from shoal.nn.dropout import dropout, dropout_key, keyed_mask, layer_key, relu_dropout


def test_keyed_mask_is_per_node_and_keeps_one_minus_p():
    key = layer_key(dropout_key(3, 1, 0), 0)
    ids = np.array([7, 2, 9, 7, 100_000_000_000], np.int64)
    x = torch.ones(5, 37)
    y = dropout(x, 0.3, True, key=key, ids=ids)
    kept = y != 0
    assert torch.equal(kept[0], kept[3])  # the same node, the same mask
    assert not torch.equal(kept[0], kept[1])
    assert torch.allclose(y[kept], torch.tensor(1 / 0.7))
    # reordering rows reorders the masks with them
    perm = np.array([4, 3, 2, 1, 0])
    y2 = dropout(x, 0.3, True, key=key, ids=ids[perm])
    assert torch.equal(y2, y[torch.from_numpy(perm)])
    big = dropout(torch.ones(2000, 64), 0.3, True, key=key, ids=np.arange(2000))
    assert abs(float((big == 0).float().mean()) - 0.3) < 0.01
    # another step, layer or seed gives another mask
    others = [(3, 1, 1, 0), (3, 1, 0, 1), (4, 1, 0, 0)]  # seed, epoch, step, layer
    for seed, epoch, step, slot in others:
        other = layer_key(dropout_key(seed, epoch, step), slot)
        assert not torch.equal(dropout(x, 0.3, True, key=other, ids=ids) != 0, kept)


@pytest.mark.parametrize("cols", [1, 4, 13, 64])
def test_torch_mask_equals_the_kernel(cols):
    """The device path (torch integer ops) draws the kernel's mask bit for bit."""
    key = layer_key(dropout_key(11, 2, 5), 1)
    ids = np.array([0, 1, 5, 2**40 + 3, 123456789], np.int64)
    x = torch.randn(len(ids), cols)
    fast = dropout(x, 0.45, True, key=key, ids=ids)
    mask = keyed_mask(torch.from_numpy(ids), key, cols, 0.45)
    torch.testing.assert_close(fast, x * mask / 0.55)
    via_torch = dropout(x.double(), 0.45, True, key=key, ids=ids)  # not float32: torch path
    torch.testing.assert_close(via_torch.float(), fast)


def test_keyed_relu_dropout_and_gradients():
    key = layer_key(dropout_key(0, 0), 2)
    ids = np.array([4, 8, 15, 16, 23, 42])
    x = torch.randn(6, 10, requires_grad=True)
    a = relu_dropout(x, 0.5, True, key=key, ids=ids)
    a.sum().backward()
    g = x.grad.clone()
    x.grad = None
    b = dropout(torch.relu(x), 0.5, True, key=key, ids=ids)
    b.sum().backward()
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(g, x.grad)


def test_keyed_needs_one_id_per_row():
    with pytest.raises(ValueError, match="one id per row"):
        dropout(torch.ones(3, 2), 0.5, True, key=1, ids=np.arange(2))


def test_model_gives_a_node_the_same_mask_in_any_block():
    """A 2-layer SAGE on a graph and on the same graph renumbered: inside keyed_dropout the
    outputs agree row for row (node for node), in training mode with dropout 0.5."""
    rng = np.random.default_rng(0)
    n = 30
    src, dst = rng.integers(0, n, 120), rng.integers(0, n, 120)

    def block(perm: np.ndarray) -> Block:
        inv = np.argsort(perm)  # new id of each original node
        s, d = inv[src], inv[dst]
        order = np.argsort(d, kind="stable")
        indptr = np.concatenate([[0], np.cumsum(np.bincount(d, minlength=n))])
        blk = full_graph_block(indptr, s[order])
        blk.node_ids = perm  # new id -> original id
        return blk

    torch.manual_seed(0)
    m = build_model("sage", in_dim=5, hidden=16, out_dim=3, num_layers=2, dropout=0.5).train()
    x = torch.randn(n, 5)
    ident, perm = np.arange(n), rng.permutation(n)
    with keyed_dropout(m, 7, 2):
        a = m(x, [block(ident)] * 2)
        b = m(x[torch.from_numpy(perm)], [block(perm)] * 2)
    torch.testing.assert_close(b, a[torch.from_numpy(perm)], rtol=1e-5, atol=1e-6)
    with keyed_dropout(m, 7, 3):  # another epoch: other masks
        c = m(x, [block(ident)] * 2)
    assert not torch.allclose(a, c)
    assert m.dropout_key is None  # left when the block ends
    no_ids = block(ident)
    no_ids.node_ids = None
    with pytest.raises(ValueError, match="node ids"), keyed_dropout(m, 7, 2):
        m(x, [no_ids] * 2)
