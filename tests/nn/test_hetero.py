"""R-GCN and R-GAT on sampled typed blocks equal the same layers on the whole graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.data.synth.igbh import IGBHConfig, generate_igbh
from shoal.nn.hetero import RGAT, RGCN, TypedInput
from shoal.sample.typed import TypedNeighborSampler


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    out = tmp_path_factory.mktemp("nnh") / "g"
    cfg = IGBHConfig(scale=0.005, features=6, classes=3, seed=2, featureless=("institute",))
    return generate_igbh(out, cfg, show_progress=False)


def _inputs(g):
    s = g.schema
    dims = [t.feature_dim for t in s.node_types]
    feats = []
    for t in s.node_types:
        x = g.node_features(t.name)
        feats.append(None if x is None else torch.from_numpy(np.array(x)))
    return s, dims, feats


def _h0(inp, s, feats, n_id):
    types = torch.from_numpy(s.type_of(n_id))
    local = torch.from_numpy(n_id - s.offsets[s.type_of(n_id)])
    per = [None if f is None else f[local[types == t]] for t, f in enumerate(feats)]
    return inp(types, local, per)


@pytest.mark.parametrize("kind", ["rgcn", "rgat"])
def test_sampled_blocks_with_every_neighbour_equal_the_whole_graph(graph, kind):
    s, dims, feats = _inputs(graph)
    torch.manual_seed(0)
    inp = TypedInput(dims, [t.count for t in s.node_types], 8)
    R = len(s.edge_types)
    model = (RGCN(8, 8, 3, R, num_bases=2) if kind == "rgcn" else RGAT(8, 8, 3, R, heads=2)).eval()
    csr = graph.csr("in")
    papers = np.arange(s.node_type("paper").count, dtype=np.int64)
    tb = TypedNeighborSampler(csr.indptr, csr.indices, s, [-1, -1]).sample(papers)
    with torch.no_grad():
        h = _h0(inp, s, feats, np.asarray(tb.n_id))
        got = model(h, tb.blocks, tb.edge_types)
        # the reference: the same layers over every node and stored edge of the graph
        e = torch.from_numpy(np.concatenate(list(graph.edge_stream())).astype(np.int64)).T
        et = torch.from_numpy(np.asarray(graph.relations()).astype(np.int64))
        x = _h0(inp, s, feats, np.arange(graph.num_nodes))
        if kind == "rgcn":
            x = torch.relu(model.convs[0](x, e, et))
            want = model.convs[1](x, e, et)
        else:
            for i, convs in enumerate(model.layers):
                y = model.roots[i](x)
                for r, conv in enumerate(convs):
                    y = y + conv(x, e[:, et == r], size=(len(x), len(x)))
                x = torch.relu(y) if i == 0 else y
            want = x
    assert torch.allclose(got, want[: len(papers)], atol=1e-5)


def test_a_type_without_features_learns_an_embedding(graph):
    s, dims, feats = _inputs(graph)
    inp = TypedInput(dims, [t.count for t in s.node_types], 4)
    inst = s.type_index("institute")
    assert isinstance(inp.maps[inst], torch.nn.Embedding) and dims[inst] is None
    ids = np.arange(s.node_type("institute").offset, s.node_type("institute").offset + 3)
    h = _h0(inp, s, feats, ids)
    assert torch.equal(h, inp.maps[inst].weight[:3])


def _block(src, dst, num_src, num_dst):
    from shoal.graph.blocks import Block

    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    rowptr = np.zeros(num_dst + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=num_dst), out=rowptr[1:])
    return Block(
        edge_index=torch.from_numpy(np.stack([src, dst])),
        num_src=num_src,
        num_dst=num_dst,
        rowptr=torch.from_numpy(rowptr),
        deg_src=torch.ones(num_src),
    )


@pytest.mark.parametrize(
    ("cls", "root"),
    [(RGCN, True), (RGAT, True), (RGAT, False)],
    ids=["rgcn", "rgat", "rgat-noroot"],
)
def test_a_node_s_output_does_not_depend_on_its_batch_mates(cls, root):
    """Target 0 has edges of relation 0 only; with a target 1 that has relation-1 edges in
    the same block, target 0's output must not change (every bias nonzero)."""
    torch.manual_seed(0)
    kw = {"heads": 2, "root": root} if cls is RGAT else {}
    m = cls(4, 4, 3, 2, num_layers=1, dropout=0.0, **kw).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.uniform_(-1, 1)
    x = torch.randn(5, 4)
    # alone: target 0 (node 0) with sources 2, 3 under relation 0
    alone = m.layer(0, x[[0, 2, 3]], _block([1, 2], [0, 0], 3, 1), torch.tensor([0, 0]))
    # together: targets 0, 1; sources 2, 3 -> 0 (relation 0), 4 -> 1 (relation 1)
    both = m.layer(
        0, x[[0, 1, 2, 3, 4]], _block([2, 3, 4], [0, 0, 1], 5, 2), torch.tensor([0, 0, 1])
    )
    torch.testing.assert_close(both[0], alone[0])
