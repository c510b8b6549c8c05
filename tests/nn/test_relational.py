"""R-GCN, R-GAT and the heterogeneous PyG adapter in the ``model(x, blocks)`` form.

A toy typed graph (papers with 5 features, authors with 3, featureless institutes; five
relations, every type a destination) sampled with every neighbour: known answers by hand,
outputs independent of a node's batch mates, exact layer-wise inference, keyed dropout,
and the MLPerf reference's R-GAT (transcribed below) equal to :class:`RGAT` weight for weight.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv, HeteroConv, SAGEConv, to_hetero
from torch_geometric.utils import trim_to_layer

from shoal.data.hetero import HeteroSchema
from shoal.graph.blocks import Block
from shoal.nn.base import keyed_dropout, layer_widths
from shoal.nn.relational import RGAT, RGCN
from shoal.nn.relational_adapter import RelationalEdgeIndexModel, hetero_inputs
from shoal.sample.sampler import NeighborSampler

ATOL = 1e-5

SCHEMA = HeteroSchema.of(
    {"paper": 6, "author": 5, "inst": 3},
    [
        ("paper", "cites", "paper"),
        ("author", "writes", "paper"),
        ("paper", "rev_writes", "author"),
        ("inst", "employs", "author"),
        ("author", "rev_employs", "inst"),
    ],
    feature_dims={"paper": 5, "author": 3, "inst": None},
    target="paper",
)
DIMS = [t.feature_dim for t in SCHEMA.node_types]
COUNTS = [t.count for t in SCHEMA.node_types]
OFF = SCHEMA.offsets
R = len(SCHEMA.edge_types)
REL_DST = [SCHEMA.type_index(e.dst) for e in SCHEMA.edge_types]
N = SCHEMA.num_nodes
HID, OUT = 8, 3


def _edges(self_loops: bool = False) -> np.ndarray:
    """Global (src, dst) pairs; paper 5 is cited by no one, inst 2 employs no one."""
    p, a, i = (lambda k: int(OFF[0]) + k), (lambda k: int(OFF[1]) + k), (lambda k: int(OFF[2]) + k)
    cites = [(0, 1), (2, 1), (3, 0), (1, 2), (4, 3), (0, 4), (2, 4), (5, 0)]
    writes = [(0, 0), (1, 0), (1, 1), (2, 2), (3, 3), (4, 4), (0, 5), (2, 3)]
    employs = [(0, 0), (0, 1), (1, 2), (1, 3), (0, 4)]
    e = [(p(s), p(d)) for s, d in cites]
    e += [(a(s), p(d)) for s, d in writes] + [(p(d), a(s)) for s, d in writes]
    e += [(i(s), a(d)) for s, d in employs] + [(a(d), i(s)) for s, d in employs]
    if self_loops:  # the MLPerf reference's loader adds them to cites
        e += [(p(k), p(k)) for k in range(COUNTS[0])]
    return np.array(sorted(set(e)), np.int64)


def _csr(self_loops: bool = False) -> tuple[np.ndarray, np.ndarray]:
    e = _edges(self_loops)
    e = e[np.lexsort((e[:, 0], e[:, 1]))]  # in-CSR: by destination, sorted sources
    indptr = np.zeros(N + 1, np.int64)
    np.cumsum(np.bincount(e[:, 1], minlength=N), out=indptr[1:])
    return indptr, e[:, 0].copy()


def _features(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(N, 5)
    for t, f in enumerate(DIMS):
        if f:
            x[OFF[t] : OFF[t + 1], :f] = torch.randn(COUNTS[t], f, generator=g)
    return x


X = _features()


def _batch(seeds, fanouts=(-1, -1), self_loops: bool = False):
    """``(x, blocks, n_id)`` of ``seeds`` (global ids) with every neighbour."""
    indptr, indices = _csr(self_loops)
    mb = NeighborSampler(indptr, indices, list(fanouts), schema=SCHEMA).sample(
        np.asarray(seeds, np.int64)
    )
    return X[torch.from_numpy(mb.n_id)], mb.with_node_ids(), mb.n_id


def _scramble(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter (biases too) drawn from U(-0.5, 0.5)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.rand(p.shape, generator=g) - 0.5)
    return model


def _kw(**extra):
    base = dict(feature_dims=DIMS, counts=COUNTS, offsets=OFF, num_relations=R, hidden=HID)
    return {**base, "out_dim": OUT, "num_layers": 2, **extra}


VARIANTS = {
    "rgcn": lambda: RGCN(**_kw(dropout=0.0)),
    "rgcn-bases": lambda: RGCN(**_kw(dropout=0.0, num_bases=2)),
    "rgat": lambda: RGAT(**_kw(relation_dst=REL_DST)),
    "rgat-no-relation-dst": lambda: RGAT(**_kw()),
    "rgat-root-loops": lambda: RGAT(**_kw(relation_dst=REL_DST, root=True, self_loops=[0])),
    "rgat-shoal-v1": lambda: RGAT(
        **_kw(relation_bias=False, root=True, final_linear=False, heads=2)
    ),
}


def _block(src, dst, num_src, num_dst, *, et, st, ids) -> Block:
    src, dst = torch.tensor(src, dtype=torch.int64), torch.tensor(dst, dtype=torch.int64)
    rowptr = torch.zeros(num_dst + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(torch.bincount(dst, minlength=num_dst), 0)
    return Block(
        torch.stack([src, dst]),
        num_src,
        num_dst,
        rowptr,
        torch.ones(num_src),
        node_ids=np.asarray(ids, np.int64),
        edge_type=torch.tensor(et, dtype=torch.int64),
        src_type=torch.tensor(st, dtype=torch.int64),
    )


# ---------------------------------------------------------------- (a) R-GCN by hand
@pytest.mark.parametrize("bases", [None, 2])
def test_rgcn_is_eq_2_by_hand(bases):
    """Two types (2 and 3 features), two relations; targets 0, 1 (type 0). Target 0: sources
    2, 3 under relation 1, source 4 under relation 0; target 1: source 3 under relation 1."""
    torch.manual_seed(0)
    m = RGCN(
        feature_dims=[2, 3],
        counts=[3, 4],
        offsets=[0, 3, 7],
        num_relations=2,
        hidden=4,
        out_dim=3,
        num_layers=1,
        dropout=0.0,
        num_bases=bases,
    )
    _scramble(m).eval()
    st = [0, 0, 1, 1, 0]
    blk = _block([2, 3, 4, 3], [0, 0, 0, 1], 5, 2, et=[1, 1, 0, 1], st=st, ids=[0, 1, 3, 4, 2])
    x = torch.randn(5, 3)
    x[[0, 1, 4], 2] = 0.0  # type 0 has 2 features
    with torch.no_grad():
        got = m(x, [blk])
        lin0, lin1 = m.input.maps
        h = torch.stack([lin0(x[i, :2]) if st[i] == 0 else lin1(x[i]) for i in range(5)])
        c = m.convs[0]
        W = c.weight if bases is None else torch.einsum("rb,bio->rio", c.comp, c.weight)
        want0 = h[0] @ c.root + (h[2] + h[3]) / 2 @ W[1] + h[4] @ W[0] + c.bias
        want1 = h[1] @ c.root + h[3] @ W[1] + c.bias
    torch.testing.assert_close(got, torch.stack([want0, want1]), atol=ATOL, rtol=1e-5)


# ---------------------------------------------------------------- (b) batch mates
@pytest.mark.parametrize("kind", list(VARIANTS))
def test_a_node_s_output_does_not_depend_on_its_batch_mates(kind):
    model = _scramble(VARIANTS[kind]()).eval()
    mates = [[5], [1, 5, 3], [0, 2, 4, 5, 1]]  # paper 5: cited by no one
    with torch.no_grad():
        outs = []
        for seeds in mates:
            x, blocks, _ = _batch(seeds)
            outs.append(model(x, blocks)[seeds.index(5)])
    for o in outs[1:]:
        torch.testing.assert_close(o, outs[0], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("kind", ["rgat", "rgat-no-relation-dst", "rgat-shoal-v1", "rgcn"])
def test_a_relation_only_a_batch_mate_has_adds_nothing_to_a_node(kind):
    """Target 0 (a paper) has relation-0 edges only; beside target 1 (a paper with a
    relation-1 edge) its output is the same: each relation's bias reaches a target by type,
    not by whether the block holds the relation's edges."""
    m = _scramble(VARIANTS[kind]()).eval()
    m.num_layers = 1  # its first layer alone
    x = torch.randn(5, 5)
    with torch.no_grad():
        alone = m.layer_forward(
            0, x[[0, 2, 3]], _block([1, 2], [0, 0], 3, 1, et=[0, 0], st=[0, 0, 0], ids=[0, 2, 3])
        )
        blk = _block(
            [2, 3, 4], [0, 0, 1], 5, 2, et=[0, 0, 1], st=[0, 0, 0, 0, 1], ids=[0, 1, 2, 3, 6]
        )
        both = m.layer_forward(0, x[[0, 1, 2, 3, 4]], blk)
    torch.testing.assert_close(both[0], alone[0], atol=1e-6, rtol=1e-6)


# ---------------------------------------------------------------- (c) layer-wise inference
@pytest.mark.parametrize("kind", list(VARIANTS))
def test_layer_by_layer_over_one_hop_blocks_equals_the_forward_pass(kind):
    """Exact layer-wise inference: every layer once for every node from the previous layer's
    rows, over the whole graph or in chunks of one-hop blocks, gives the forward pass."""
    model = _scramble(VARIANTS[kind]()).eval()
    seeds = [0, 3, 5, 1]
    indptr, indices = _csr()
    one_hop = NeighborSampler(indptr, indices, [-1], schema=SCHEMA)
    with torch.no_grad():
        x, blocks, _ = _batch(seeds)
        want = model(x, blocks)
        # the whole graph as one one-hop block (every node a target)
        tb = one_hop.sample(np.arange(N))
        assert np.array_equal(tb.n_id, np.arange(N))
        (blk,) = tb.with_node_ids()
        h = X
        for layer in range(model.num_layers):
            h = model.layer_forward(layer, h, blk)
        torch.testing.assert_close(h[seeds], want, atol=ATOL, rtol=1e-5)
        # in chunks, as the layer-wise inference runs it
        h = X
        for layer in range(model.num_layers):
            nxt = []
            for chunk in np.array_split(np.arange(N), 4):
                tb = one_hop.sample(chunk)
                (b,) = tb.with_node_ids()
                nxt.append(model.layer_forward(layer, h[torch.from_numpy(tb.n_id)], b))
            h = torch.cat(nxt)
        torch.testing.assert_close(h[seeds], want, atol=ATOL, rtol=1e-5)


def test_layer_widths_probe_the_output_of_every_layer():
    assert layer_widths(RGCN(**_kw()), 5) == [5, HID, OUT]
    assert layer_widths(RGAT(**_kw(relation_dst=REL_DST)), 5) == [5, HID, OUT]
    assert layer_widths(RGAT(**_kw(final_linear=False, num_layers=3)), 5) == [5, HID, HID, OUT]


# ---------------------------------------------------------------- (d) keyed dropout
@pytest.mark.parametrize("cls", [RGCN, RGAT])
def test_keyed_dropout_gives_a_node_the_same_masks_in_any_batch(cls):
    model = _scramble(
        cls(
            **_kw(dropout=0.5, input_dropout=0.3, relation_dst=REL_DST)
            if cls is RGAT
            else _kw(dropout=0.5, input_dropout=0.3)
        )
    )
    model.train()
    a, b = _batch([5]), _batch([2, 4, 5])
    with keyed_dropout(model, seed=7, epoch=1, step=3):
        ya = model(a[0], a[1])[0]
        yb = model(b[0], b[1])[2]
    torch.testing.assert_close(ya, yb, atol=1e-6, rtol=1e-6)
    with keyed_dropout(model, seed=7, epoch=1, step=4):  # another step: other masks
        yc = model(a[0], a[1])[0]
    assert not torch.allclose(ya, yc)
    # every site is keyed: input (slot 0) and between the layers
    blk = a[1][0]
    with keyed_dropout(model, seed=7, epoch=1):
        assert set(model.dropout_site(0, blk, blk.num_src)) == {"key", "ids"}
        assert set(model.dropout_site(1, blk, blk.num_dst)) == {"key", "ids"}
        with pytest.raises(ValueError, match="node.ids"):
            model(a[0], [replace(bk, node_ids=None) for bk in a[1]])


# ---------------------------------------------------------------- (e) featureless types
def test_a_featureless_type_reads_its_embedding_row_by_original_id():
    m = _scramble(RGCN(**_kw(num_layers=1))).eval()
    x, blocks, n_id = _batch([0, 2], fanouts=(-1, -1))
    blk = blocks[0]
    inst = SCHEMA.type_index("inst")
    on = (blk.src_type == inst).nonzero().squeeze(1)
    assert len(on) > 0
    emb = m.input.maps[inst]
    assert isinstance(emb, torch.nn.Embedding) and emb.num_embeddings == COUNTS[inst]
    with torch.no_grad():
        h = m.input_rows(x, blk)
        ids = torch.from_numpy(n_id[on.numpy()] - OFF[inst])
        torch.testing.assert_close(h[on], emb.weight[ids])
        # its rows of x are ignored
        y = m.input_rows(x.index_fill(0, on, 9.0), blk)
        torch.testing.assert_close(y, h)
    with pytest.raises(ValueError, match="node_ids"):
        m.input_rows(x, replace(blk, node_ids=None))


def test_a_given_featureless_type_takes_its_rows_from_x():
    given = [False, False, True]
    m = _scramble(RGCN(**_kw(given=given))).eval()
    x, blocks, _ = _batch([0, 2])
    blk = blocks[0]
    with pytest.raises(ValueError, match="columns"):  # rows of width hidden do not fit
        m.input_rows(x, blk)
    xx = torch.cat([x, torch.zeros(len(x), HID - 5)], 1)
    on = (blk.src_type == 2).nonzero().squeeze(1)
    xx[on] = torch.randn(len(on), HID)
    with torch.no_grad():
        torch.testing.assert_close(m.input_rows(xx, blk)[on], xx[on])
    assert m.input.in_width == HID and not m.input.needs_ids
    with pytest.raises(ValueError, match="in_dim"):
        RGCN(**_kw(given=given, in_dim=5))


def test_no_features_at_all_takes_an_empty_x():
    dims = [None, None, None]
    m = RGAT(**{**_kw(relation_dst=REL_DST), "feature_dims": dims}).eval()
    x, blocks, _ = _batch([0, 5])
    with torch.no_grad():
        out = m(x[:, :0], blocks)
    assert out.shape == (2, OUT) and torch.isfinite(out).all()


# ---------------------------------------------------------------- (f) absent relations
@pytest.mark.parametrize("kind", ["rgcn", "rgat", "rgat-shoal-v1"])
def test_a_relation_absent_from_a_batch_is_fine(kind):
    """Only relation 0 in the block: the other relations' weights change nothing."""
    m = _scramble(VARIANTS[kind]()).eval()
    m.num_layers = 1
    blk = _block([1, 2], [0, 0], 3, 1, et=[0, 0], st=[0, 0, 0], ids=[0, 2, 3])
    x = torch.randn(3, 5)
    with torch.no_grad():
        y = m.layer_forward(0, x, blk)
        if isinstance(m, RGAT):
            for r in range(1, R):
                m.convs[0][r].lin.weight.mul_(3.0)
        else:
            m.convs[0].weight[1:].mul_(3.0)
        z = m.layer_forward(0, x, blk)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, z)


# ---------------------------------------------------------------- (g) errors
@pytest.mark.parametrize("cls", [RGCN, RGAT])
def test_untyped_blocks_are_refused_clearly(cls):
    m = cls(**_kw())
    x, blocks, _ = _batch([0, 1])
    with pytest.raises(ValueError, match="no edge_type"):
        m(x, [replace(b, edge_type=None) for b in blocks])
    with pytest.raises(ValueError, match="no src_type"):
        m(x, [replace(b, src_type=None) for b in blocks])
    bad = replace(blocks[0], edge_type=torch.full_like(blocks[0].edge_type, R))
    with pytest.raises(ValueError, match="edge types must lie"):
        m(x, [bad, blocks[1]])
    with pytest.raises(ValueError, match="columns"):
        m(x[:, :2], blocks)
    with pytest.raises(ValueError, match="offsets"):
        cls(**{**_kw(), "offsets": [0, 6, 10, 14]})


def test_rgat_option_errors():
    with pytest.raises(ValueError, match="self_loops"):
        RGAT(**_kw(self_loops=[0]))  # needs relation_dst
    with pytest.raises(ValueError, match="relation_dst"):
        RGAT(**_kw(relation_dst=[0, 0]))
    with pytest.raises(ValueError, match="heads"):
        RGAT(**_kw(heads=3))


# ---------------------------------------------------------------- (h) the MLPerf reference
class ReferenceRGNN(torch.nn.Module):
    """mlcommons/training ``graph_neural_network/rgnn.py`` (``retired_benchmarks/rgat/`` since
    training v6.0), class ``RGNN`` with ``model="rgat"`` and ``node_type`` set, transcribed."""

    def __init__(
        self,
        etypes,
        in_dim,
        h_dim,
        out_dim,
        num_layers=2,
        dropout=0.2,
        heads=4,
        node_type=None,
        with_trim=False,
    ):
        super().__init__()
        self.node_type = node_type
        self.lin = torch.nn.Linear(h_dim, out_dim)
        self.convs = torch.nn.ModuleList()
        for i in range(num_layers):
            in_dim = in_dim if i == 0 else h_dim
            self.convs.append(
                HeteroConv(
                    {
                        etype: GATConv(in_dim, h_dim // heads, heads=heads, add_self_loops=False)
                        for etype in etypes
                    }
                )
            )
        self.dropout = torch.nn.Dropout(dropout)
        self.with_trim = with_trim

    def forward(
        self, x_dict, edge_index_dict, num_sampled_edges_dict=None, num_sampled_nodes_dict=None
    ):
        for i, conv in enumerate(self.convs):
            if self.with_trim:
                x_dict, edge_index_dict, _ = trim_to_layer(
                    layer=i,
                    num_sampled_nodes_per_hop=num_sampled_nodes_dict,
                    num_sampled_edges_per_hop=num_sampled_edges_dict,
                    x=x_dict,
                    edge_index=edge_index_dict,
                )
            for key in list(edge_index_dict.keys()):
                if key[0] not in x_dict or key[-1] not in x_dict:
                    del edge_index_dict[key]
            x_dict = conv(x_dict, edge_index_dict)
            if i != len(self.convs) - 1:
                x_dict = {key: F.leaky_relu(x) for key, x in x_dict.items()}
                x_dict = {key: self.dropout(x) for key, x in x_dict.items()}
        return self.lin(x_dict[self.node_type])


def test_rgat_defaults_have_the_reference_s_structure():
    m = RGAT(**_kw(relation_dst=REL_DST, num_layers=3))
    gats = [c for c in m.modules() if isinstance(c, GATConv)]
    assert len(gats) == 3 * R  # a GATConv per layer and relation
    assert all(c.heads == 4 and c.concat and not c.add_self_loops for c in gats)
    assert all(c.dropout == 0.0 and c.negative_slope == 0.2 for c in gats)
    assert [tuple(b.shape) for b in m.biases] == [(R, HID)] * 3  # a bias per relation
    last = m.convs[-1]
    assert last[0].heads == 4 and last[0].out_channels * 4 == HID  # 4-head last convolution
    assert isinstance(m.lin, torch.nn.Linear) and (m.lin.in_features, m.lin.out_features) == (
        HID,
        OUT,
    )
    assert m.dropout == 0.2 and m.input_dropout == 0.0 and m.activation is F.leaky_relu
    assert not m.root and m.self_loops == []


def _copy_reference(ref: ReferenceRGNN, m: RGAT) -> None:
    with torch.no_grad():
        for i, hc in enumerate(ref.convs):
            for r, et in enumerate(SCHEMA.edge_types):
                src, dst = hc.convs[et.key], m.convs[i][r]
                dst.lin.weight.copy_(src.lin.weight)
                dst.att_src.copy_(src.att_src)
                dst.att_dst.copy_(src.att_dst)
                m.biases[i][r].copy_(src.bias)
        m.lin.load_state_dict(ref.lin.state_dict())


@pytest.mark.parametrize("trim", [False, True])
@pytest.mark.parametrize("loops", [False, True])
def test_rgat_equals_the_reference_weight_for_weight(trim, loops):
    """The reference through the adapter (PyG's layout, every relation listed) and
    :class:`RGAT` with its weights agree on the seeds; with the reference's loader-added
    self-loops on cites in the data, RGAT's ``self_loops`` option on data without them."""
    torch.manual_seed(3)
    keys = [e.key for e in SCHEMA.edge_types]
    ref = _scramble(
        ReferenceRGNN(keys, HID, HID, OUT, num_layers=2, node_type="paper", with_trim=trim), 1
    )
    ad = _scramble(RelationalEdgeIndexModel(ref, SCHEMA, hidden=HID, num_layers=2), 1).eval()
    assert ad.trims
    m = RGAT(**_kw(relation_dst=REL_DST, self_loops=[0] if loops else ())).eval()
    _copy_reference(ref, m)
    m.input.load_state_dict(ad.input.state_dict())
    seeds = [0, 5, 2, 4]
    with torch.no_grad():
        x, blocks, _ = _batch(seeds, self_loops=loops)
        want = ad(x, blocks)
        x, blocks, _ = _batch(seeds)
        got = m(x, blocks)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-5)


# ---------------------------------------------------------------- (i) the adapter
class _Sage(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = SAGEConv(HID, HID), SAGEConv(HID, OUT)

    def forward(self, x, edge_index):
        return self.c2(self.c1(x, edge_index).relu(), edge_index)


def _hetero_sage() -> RelationalEdgeIndexModel:
    torch.manual_seed(1)
    meta = (SCHEMA.type_names, [e.key for e in SCHEMA.edge_types])
    return _scramble(
        RelationalEdgeIndexModel(
            to_hetero(_Sage(), meta, aggr="sum"), SCHEMA, hidden=HID, num_layers=2
        )
    ).eval()


def test_the_adapter_runs_a_to_hetero_sage_independently_of_batch_mates():
    ad = _hetero_sage()
    assert not ad.trims
    with torch.no_grad():
        outs = []
        for seeds in ([5], [1, 5, 3], [0, 2, 4, 5, 1]):
            x, blocks, _ = _batch(seeds)
            outs.append(ad(x, blocks)[seeds.index(5)])
        # the same model over the whole graph
        e = torch.from_numpy(_edges()).T
        kind = torch.from_numpy(SCHEMA.type_of(np.arange(N)))
        ids = np.arange(N)
        h = ad.input(X, kind, ids)
        whole = Block(e, N, N, torch.zeros(N + 1, dtype=torch.int64), torch.ones(N))
        et = torch.from_numpy(SCHEMA.pair_relations()[kind[e[0]], kind[e[1]]])
        whole = replace(whole, edge_type=et, src_type=kind, node_ids=ids)
        hb = hetero_inputs(SCHEMA, h, [whole])
        want = ad.module(hb.x_dict, hb.edge_index_dict)["paper"][5]
    for o in outs:
        torch.testing.assert_close(o, want, atol=1e-6, rtol=1e-6)


def test_the_adapter_s_layout_is_pyg_s():
    """Seeds first among their type; each node's in-edges from the hop after it first
    appears (shoal's repeat draws of known nodes left out); counts per hop."""
    x, blocks, n_id = _batch([5, 0])
    kind = blocks[0].src_type
    hb = hetero_inputs(SCHEMA, torch.arange(len(n_id), dtype=torch.float32)[:, None], blocks)
    assert hb.x_dict["paper"][:2].flatten().tolist() == [0.0, 1.0]
    L = len(blocks)
    for name, per in hb.num_sampled_nodes_dict.items():
        assert len(per) == L + 1 and sum(per) == len(hb.x_dict[name])
    got = set()
    for et, ei in hb.edge_index_dict.items():
        assert len(hb.num_sampled_edges_dict[et]) == L
        assert sum(hb.num_sampled_edges_dict[et]) == ei.shape[1]
        s, d = SCHEMA.type_index(et[0]), SCHEMA.type_index(et[2])
        ls = (kind == s).nonzero().squeeze(1)
        ld = (kind == d).nonzero().squeeze(1)
        for a, b in ei.T.tolist():
            got.add((int(n_id[ls[a]]), int(n_id[ld[b]])))
    # every in-edge of every node within one hop of a seed, each once
    near = set(n_id[: blocks[0].num_dst].tolist())
    want = {(int(a), int(b)) for a, b in _edges() if b in near}
    assert got == want
    assert sum(v.shape[1] for v in hb.edge_index_dict.values()) == len(want)


def test_the_adapter_refuses_seeds_of_another_type_and_untyped_blocks():
    ad = _hetero_sage()
    x, blocks, _ = _batch([int(OFF[1])])  # an author
    with pytest.raises(ValueError, match="target type"):
        ad(x, blocks)
    x, blocks, _ = _batch([0])
    with pytest.raises(ValueError, match="no edge_type"):
        ad(x, [replace(b, edge_type=None) for b in blocks])
    with pytest.raises(ValueError, match="2 layers"):
        ad(x, blocks[:1])
