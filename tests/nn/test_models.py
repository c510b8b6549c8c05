"""Models: shapes on blocks and full graphs, exactness against PyG layers, registry, overfit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.nn import GCNConv

from shoal.graph import full_graph_block
from shoal.nn import MODELS, build_model
from shoal.nn.dropout import dropout
from shoal.sample import NeighborSampler


@pytest.fixture(scope="module")
def graph():
    rng = np.random.default_rng(0)
    n = 40
    e = np.unique(rng.integers(0, n, (200, 2)), axis=0)
    e = e[e[:, 0] != e[:, 1]]
    order = np.argsort(e[:, 1], kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(e[:, 1], minlength=n), out=indptr[1:])
    return n, indptr, e[order, 0].copy(), torch.from_numpy(e.T.copy())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_shapes_on_blocks_and_full_graph(name, graph):
    n, indptr, indices, _ = graph
    torch.manual_seed(0)
    m = build_model(name, in_dim=6, hidden=16, out_dim=3, num_layers=2, dropout=0.5)
    x = torch.randn(n, 6)
    mb = NeighborSampler(indptr, indices, (3, 2)).sample(np.array([0, 5, 9]), 1)
    out = m(x[torch.from_numpy(mb.n_id)], mb.blocks)
    assert out.shape == (3, 3)
    out.sum().backward()
    assert all(p.grad is not None for p in m.parameters() if p.requires_grad)
    fb = full_graph_block(indptr, indices)
    m.eval()
    full = m(x, [fb, fb])
    assert full.shape == (n, 3)
    # exact inference: full-neighbour blocks give the same rows as the full graph
    mb_full = NeighborSampler(indptr, indices, (-1, -1)).sample(np.array([0, 5, 9]), 0)
    sub = m(x[torch.from_numpy(mb_full.n_id)], mb_full.blocks)
    assert torch.allclose(sub, full[[0, 5, 9]], atol=1e-5)


def test_gcn_equals_pyg_gcnconv_on_full_graph(graph):
    n, indptr, indices, ei = graph
    m = build_model("gcn", in_dim=8, hidden=8, out_dim=5, num_layers=1, dropout=0.0).eval()
    x = torch.randn(n, 8)
    ref = m.convs[0](x, ei)  # PyG's own GCNConv forward (self loops, symmetric norm)
    assert torch.allclose(m(x, [full_graph_block(indptr, indices)]), ref, atol=1e-5)
    assert isinstance(m.convs[0], GCNConv)


@pytest.mark.parametrize("name,dims", [("sage", (8, 5)), ("sage", (4, 9)), ("gin", (8, 5))])
def test_sage_and_gin_equal_pyg_layers(name, dims, graph):
    n, indptr, indices, ei = graph
    m = build_model(name, in_dim=dims[0], hidden=8, out_dim=dims[1], num_layers=1, dropout=0)
    m.eval()
    x = torch.randn(n, dims[0])
    assert torch.allclose(m(x, [full_graph_block(indptr, indices)]), m.convs[0](x, ei), atol=1e-5)


def test_registry_error_lists_names():
    with pytest.raises(ValueError, match="gat, gcn, gin, sage, sgc"):
        build_model("nope", in_dim=1, hidden=1, out_dim=1, num_layers=1, dropout=0)


def test_layer_count_mismatch_is_an_error(graph):
    n, indptr, indices, _ = graph
    m = build_model("sage", in_dim=4, hidden=8, out_dim=2, num_layers=2, dropout=0)
    with pytest.raises(ValueError, match="2 layers"):
        m(torch.randn(n, 4), [full_graph_block(indptr, indices)])


def test_dropout_keep_rate_scale_gradient_and_determinism():
    x = torch.ones(300, 37, requires_grad=True)
    torch.manual_seed(3)
    y = dropout(x, 0.3, True)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.02
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / 0.7))
    y.sum().backward()
    assert torch.equal(x.grad != 0, kept)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.3, True), y)
    assert dropout(x, 0.3, False) is x


@pytest.mark.parametrize("name", sorted(MODELS))
def test_tiny_overfit(name, graph):
    n, indptr, indices, _ = graph
    torch.manual_seed(0)
    x = torch.randn(n, 8)
    fb = full_graph_block(indptr, indices)
    m = build_model(name, in_dim=8, hidden=32, out_dim=3, num_layers=2, dropout=0.0)
    if name == "sgc":  # SGC is linear: it can fit labels made by another SGC, not random ones
        with torch.no_grad():
            teacher = build_model(name, in_dim=8, hidden=32, out_dim=3, num_layers=2, dropout=0)
            y = teacher(x, [fb, fb]).argmax(1)
    else:
        y = torch.randint(0, 3, (n,))
    opt = torch.optim.Adam(m.parameters(), lr={"sgc": 0.2, "gin": 0.01}.get(name, 0.05))
    losses = []
    for _ in range(80):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(x, [fb, fb]), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    acc = (m(x, [fb, fb]).argmax(1) == y).float().mean().item()
    assert losses[-1] < 0.8 * losses[0]
    assert acc >= 0.9, acc


def test_relu_dropout_matches_relu_then_dropout():
    from shoal.nn.dropout import relu_dropout

    x = torch.randn(50, 13, requires_grad=True)
    torch.manual_seed(5)
    a = relu_dropout(x, 0.4, True)
    a.sum().backward()
    g1 = x.grad.clone()
    x.grad = None
    torch.manual_seed(5)
    b = dropout(torch.relu(x), 0.4, True)
    b.sum().backward()
    assert torch.allclose(a, b) and torch.allclose(g1, x.grad)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("dims", [(6, 16, 3), (16, 4, 3)])  # widening and shrinking layers
def test_sum_layer_equals_layer_forward(name, dims, graph):
    """A SumLayer computed by an explicit per-edge sum (duplicate edges and isolated nodes
    included) gives the layer's output on the full-neighbourhood block."""
    n, indptr, indices, _ = graph
    if name == "gat":  # attention is not a sum of messages
        m = build_model(name, in_dim=6, hidden=16, out_dim=3, num_layers=2, dropout=0.5)
        assert m.sum_layer(0) is None
        return
    indices = indices.copy()
    indices[:3] = indices[0]  # a repeated in-neighbour of node 0's row (or its neighbour's)
    torch.manual_seed(0)
    m = build_model(
        name, in_dim=dims[0], hidden=dims[1], out_dim=dims[2], num_layers=2, dropout=0.5
    ).eval()
    fb = full_graph_block(indptr, indices)
    deg = torch.from_numpy(np.diff(indptr).astype(np.float32)).unsqueeze(1)
    dst = np.repeat(np.arange(n), np.diff(indptr))
    x = torch.randn(n, dims[0])
    for layer in range(2):
        sl = m.sum_layer(layer)
        with torch.no_grad():
            ref = m.layer_forward(layer, x, fb)
            h = sl.pre(x) if sl.pre is not None else x
            msg = sl.message(h, deg)
            assert msg.shape[1] == sl.width
            agg = torch.zeros(n, sl.width).index_add_(
                0, torch.from_numpy(dst), msg[torch.from_numpy(indices)]
            )
            got = sl.finish(agg, h, deg)
        assert torch.allclose(got, ref, atol=1e-5), (name, layer)
        x = ref


def test_sage_projects_before_or_after_the_mean_as_it_costs_less():
    """A sampled block (many sources, few targets) aggregates first; a full-graph block whose
    rows shrink projects first; either order gives the same outputs and gradients."""
    from shoal.graph.blocks import Block
    from shoal.nn.base import project_first
    from shoal.nn.sage import GraphSAGE

    rng = np.random.default_rng(3)
    num_dst, num_src, per = 6, 40, 6
    dst = np.repeat(np.arange(num_dst), per)
    src = rng.integers(0, num_src, len(dst))
    rowptr = torch.arange(0, len(dst) + 1, per)
    ei = torch.from_numpy(np.stack([src, dst]))
    sampled = Block(ei, num_src, num_dst, rowptr, torch.ones(num_src))
    full = Block(ei, num_dst, num_dst, rowptr, torch.ones(num_dst))
    full.edge_index = torch.from_numpy(np.stack([src % num_dst, dst]))
    assert not project_first(sampled, 32, 8) and project_first(full, 32, 8)
    assert not project_first(full, 8, 32)  # widening rows: after
    torch.manual_seed(0)
    m = GraphSAGE(in_dim=32, hidden=8, out_dim=3, num_layers=1, dropout=0.0).eval()
    c = m.convs[0]
    for block in (sampled, full):
        x = torch.randn(block.num_src, 32, requires_grad=True)
        out = m.conv(0, x, block)
        mean = torch.zeros(block.num_dst, 32).index_add_(
            0, block.edge_index[1], x[block.edge_index[0]]
        )
        ref = c.lin_l(mean / per) + x[: block.num_dst] @ c.lin_r.weight.t()
        assert torch.allclose(out, ref, atol=1e-5)
        g = torch.autograd.grad(out.sum(), [x, c.lin_l.weight])
        gr = torch.autograd.grad(ref.sum(), [x, c.lin_l.weight])
        assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(g, gr, strict=True))


@pytest.mark.parametrize("name", ["sage", "gcn"])
def test_either_order_of_weight_and_aggregation_gives_the_same_layer(name, monkeypatch):
    """The weight applied before or after the (linear) aggregation: the same outputs and
    gradients on a sampled block, whichever order :func:`project_first` would pick."""
    import importlib

    from shoal.graph.blocks import Block

    mod = importlib.import_module(f"shoal.nn.{name}")
    rng = np.random.default_rng(4)
    dst = np.repeat(np.arange(5), 4)
    ei = torch.from_numpy(np.stack([rng.integers(0, 30, len(dst)), dst]))
    deg = torch.from_numpy(rng.integers(1, 9, 30).astype(np.float32))
    block = Block(ei, 30, 5, torch.arange(0, 21, 4), deg)
    torch.manual_seed(1)
    m = build_model(name, in_dim=16, hidden=4, out_dim=3, num_layers=1, dropout=0.0).eval()
    x = torch.randn(30, 16, requires_grad=True)
    got = []
    for first in (True, False):
        monkeypatch.setattr(mod, "project_first", lambda *a, f=first: f)
        out = m.conv(0, x, block)
        got.append((out, *torch.autograd.grad(out.square().sum(), [x, *m.parameters()])))
    for a, b in zip(*got, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
