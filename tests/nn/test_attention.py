"""GAT's attention summed over the block's CSR (shoal.nn.attention) against PyG's GATConv."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.nn import GATConv

from shoal.graph.blocks import Block
from shoal.nn.attention import (
    attend,
    attend_projected,
    edge_softmax,
    looped_csr,
    weighted_sum,
)
from shoal.nn.gat import GAT


def _block(edges: list[tuple[int, int]], n_src: int, n_dst: int) -> Block:
    """A block of ``(src, dst)`` local edges, sorted by target (CSR order)."""
    e = sorted(edges, key=lambda t: t[1])
    src = torch.tensor([a for a, _ in e], dtype=torch.int64)
    dst = torch.tensor([b for _, b in e], dtype=torch.int64)
    ptr = torch.zeros(n_dst + 1, dtype=torch.int64)
    ptr[1:] = torch.cumsum(torch.bincount(dst, minlength=n_dst), 0)
    return Block(torch.stack([src, dst]), n_src, n_dst, ptr, torch.ones(n_src))


# target 3 has no in-edges, 4 -> 0 is given twice, 0 -> 0 and 1 -> 1 are self loops
MIXED = _block([(4, 0), (4, 0), (0, 0), (5, 0), (1, 1), (2, 1), (6, 2), (0, 2), (1, 2)], 7, 4)


def test_looped_csr_replaces_self_loops_with_one_per_target():
    rowptr, col, row = looped_csr(MIXED)
    assert rowptr.tolist() == [0, 4, 6, 10, 11]
    assert col.tolist() == [4, 4, 5, 0, 2, 1, 6, 0, 1, 2, 3]
    assert row.tolist() == [0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 3]
    empty = _block([], 3, 2)
    rowptr, col, _ = looped_csr(empty)
    assert rowptr.tolist() == [0, 1, 2] and col.tolist() == [0, 1]


@pytest.mark.parametrize(("heads", "concat"), [(3, True), (1, False), (2, False)])
@pytest.mark.parametrize("block", [MIXED, _block([(1, 0), (2, 0), (2, 1)], 3, 2)])
def test_attend_equals_gatconv_with_gradients(heads, concat, block):
    torch.manual_seed(0)
    c = GATConv(5, 4, heads=heads, concat=concat, dropout=0.0)
    x = torch.randn(block.num_src, 5, requires_grad=True)
    ref = c((x, x[: block.num_dst]), block.edge_index)
    g = torch.randn_like(ref)
    want = torch.autograd.grad(ref, [x, *c.parameters()], g)
    h = c.lin(x).view(-1, heads, 4)
    a_src, a_dst = (h * c.att_src).sum(-1), (h[: block.num_dst] * c.att_dst).sum(-1)
    out = attend(h, a_src, a_dst, block, negative_slope=c.negative_slope)
    out = out.reshape(block.num_dst, -1) if concat else out.mean(1)
    out = out + c.bias
    got = torch.autograd.grad(out, [x, *c.parameters()], g)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_the_gat_model_equals_its_gatconv_layers():
    """The model's layers (fused on the CPU) against the same GATConv modules called as PyG
    does, outputs and every parameter's gradient, with dropout off."""
    torch.manual_seed(1)
    model = GAT(in_dim=5, hidden=6, out_dim=3, heads=3, dropout=0.0)
    blocks = [MIXED, _block([(1, 0), (3, 0), (2, 1), (0, 1)], 4, 2)]
    x = torch.randn(7, 5)
    out = model(x, blocks)
    got = torch.autograd.grad(out.sum(), list(model.parameters()))
    h = x
    for i, (conv, blk) in enumerate(zip(model.convs, blocks, strict=True)):
        h = conv((h, h[: blk.num_dst]), blk.edge_index)
        h = torch.nn.functional.elu(h) if i == 0 else h
    want = torch.autograd.grad(h.sum(), list(model.parameters()))
    torch.testing.assert_close(out, h, atol=1e-5, rtol=1e-5)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_attention_dropout_only_while_training():
    torch.manual_seed(2)
    h = torch.randn(7, 2, 3)
    a_src, a_dst = torch.randn(7, 2), torch.randn(4, 2)
    off = attend(h, a_src, a_dst, MIXED)
    assert torch.equal(attend(h, a_src, a_dst, MIXED, dropout=0.5, training=False), off)
    dropped = attend(h, a_src, a_dst, MIXED, dropout=0.5, training=True)
    assert not torch.allclose(dropped, off)
    with pytest.raises(ValueError, match="dropout"):
        attend(h, a_src, a_dst, MIXED, dropout=1.0, training=True)


def test_the_kernels_equal_the_torch_path_of_other_devices_and_dtypes():
    """float64 inputs take the torch operations (the path of a GPU); float32 the kernels."""
    torch.manual_seed(3)
    rowptr, col, row = looped_csr(MIXED)
    a_src = torch.randn(7, 2, dtype=torch.float64, requires_grad=True)
    a_dst = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    h = torch.randn(7, 2, 3, dtype=torch.float64, requires_grad=True)
    ref = weighted_sum(edge_softmax(a_src, a_dst, rowptr, col, row), h, rowptr, col, row)
    g = torch.randn_like(ref)
    want = torch.autograd.grad(ref, [a_src, a_dst, h], g)
    f32 = [t.detach().float().requires_grad_() for t in (a_src, a_dst, h)]
    out = weighted_sum(edge_softmax(f32[0], f32[1], rowptr, col, row), f32[2], rowptr, col, row)
    got = torch.autograd.grad(out, f32, g.float())
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.double(), b, atol=1e-5, rtol=1e-5)


def _split(y: torch.Tensor, heads: int, ch: int, num_dst: int) -> tuple:
    hc = heads * ch
    return y[:, :hc].reshape(-1, heads, ch), y[:, hc : hc + heads], y[:num_dst, hc + heads :]


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize(
    "block",
    [MIXED, _block([(1, 0)], 5, 2)],  # (sources 2-4 without an edge: zero gradients)
)
def test_attend_projected_equals_attend_on_its_column_blocks(block, training):
    """One autograd function over ``y``'s blocks against :func:`attend` on views of them
    (autograd assembling ``y``'s gradient), the same attention dropout mask (one seed drawn
    from torch's generator by either)."""
    heads, ch = 2, 3
    y = torch.randn(block.num_src, heads * ch + 2 * heads, requires_grad=True)
    torch.manual_seed(4)
    ref = attend(*_split(y, heads, ch, block.num_dst), block, dropout=0.5, training=training)
    g = torch.randn_like(ref)
    (want,) = torch.autograd.grad(ref, [y], g)
    torch.manual_seed(4)
    out = attend_projected(y, heads, ch, block, dropout=0.5, training=training)
    (got,) = torch.autograd.grad(out, [y], g)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert got[block.num_dst :, heads * ch + heads :].abs().sum() == 0  # a_dst: targets only


def test_attend_projected_in_float64_takes_the_torch_path_with_the_same_numbers():
    torch.manual_seed(5)
    y = torch.randn(7, 2 * 3 + 4, dtype=torch.float64, requires_grad=True)
    ref = attend_projected(y, 2, 3, MIXED, negative_slope=0.1)
    g = torch.randn_like(ref)
    (want,) = torch.autograd.grad(ref, [y], g)
    y32 = y.detach().float().requires_grad_()
    out = attend_projected(y32, 2, 3, MIXED, negative_slope=0.1)
    (got,) = torch.autograd.grad(out, [y32], g.float())
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


def test_attend_projected_refuses_a_projection_of_the_wrong_width():
    with pytest.raises(ValueError, match=r"heads \* channels \+ 2 \* heads"):
        attend_projected(torch.randn(7, 9), 2, 3, MIXED)
    with pytest.raises(ValueError, match="dropout"):
        attend_projected(torch.randn(7, 10), 2, 3, MIXED, dropout=1.0, training=True)
