"""Sampling a typed graph: a fanout per relation, drawn from the graph's own edges, typed blocks
(one sampler for every graph: an untyped one is the case of one relation)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from shoal.data.format import GraphDir
from shoal.data.hetero import HeteroSchema
from shoal.data.hetero_writer import HeteroGraphWriter
from shoal.data.synth.igbh import IGBHConfig, generate_igbh
from shoal.errors import ShoalInputError
from shoal.sample.sampler import NeighborSampler


@pytest.fixture(scope="module")
def igbh(tmp_path_factory):
    out = tmp_path_factory.mktemp("typed") / "g"
    cfg = IGBHConfig(scale=0.01, features=4, classes=3, seed=1)
    return generate_igbh(out, cfg, show_progress=False)


def _stored(g):
    """{(src, dst): Counter of relations} of every stored edge."""
    e = np.concatenate(list(g.edge_stream()))
    rel = np.asarray(g.relations())
    out: dict = {}
    for (a, b), r in zip(e.tolist(), rel.tolist(), strict=True):
        out.setdefault((a, b), Counter())[r] += 1
    return out


def test_each_relation_gets_its_own_fanout(igbh):
    s = igbh.schema
    csr = igbh.csr("in")
    fan = {"rev_written_by": [7, 1]}
    sp = NeighborSampler(csr.indptr, csr.indices, [2, 3], schema=s, relation_fanouts=fan)
    papers = np.arange(200, dtype=np.int64)  # paper ids come first
    tb = sp.sample(papers, seed=5)
    stored = _stored(igbh)
    n_id = np.asarray(tb.n_id)
    assert np.array_equal(n_id[:200], papers)
    assert (tb.node_type.numpy() == s.type_of(n_id)).all()
    assert all((b.src_type.numpy() == s.type_of(n_id[: b.num_src])).all() for b in tb.blocks)
    # the last block's targets are the seeds: per target and relation, min(fanout, degree)
    blk = tb.blocks[-1]
    et = blk.edge_type.numpy()
    src, dst = n_id[blk.edge_index[0].numpy()], n_id[blk.edge_index[1].numpy()]
    ind, ptr = np.asarray(csr.indices), np.asarray(csr.indptr)
    for v in papers[:50]:
        nbrs = ind[ptr[v] : ptr[v + 1]]
        for r, e in enumerate(s.edge_types):
            if e.dst != "paper":
                continue
            deg = int(sum(stored[(int(u), int(v))][r] for u in set(nbrs.tolist())))
            k = 7 if e.relation == "rev_written_by" else 2
            got = int(((dst == v) & (et == r)).sum())
            assert got == min(k, deg), (v, e.relation)
    # every sampled edge is a stored edge of the relation given
    for a, b, r in zip(src.tolist(), dst.tolist(), et.tolist(), strict=True):
        assert stored[(a, b)][r] > 0
    assert (tb.blocks[0].edge_type.numpy() >= 0).all()
    again = sp.sample(papers, seed=5)
    assert all(np.array_equal(x.edge_index, y.edge_index) for x, y in zip(tb.blocks, again.blocks))


def test_minus_one_takes_every_neighbour(igbh):
    s, csr = igbh.schema, igbh.csr("in")
    sp = NeighborSampler(csr.indptr, csr.indices, [-1], schema=s)
    seeds = np.array([3, 1500, 4000], dtype=np.int64)  # a paper, an author, an author
    blk = sp.sample(seeds, seed=0).blocks[0]
    deg = np.diff(np.asarray(csr.indptr))[seeds]
    assert np.array_equal(blk.count_dst.numpy(), deg)


def test_two_relations_between_one_type_pair_are_refused(tmp_path):
    schema = HeteroSchema.of({"a": 2}, [("a", "likes", "a"), ("a", "hates", "a")])
    with HeteroGraphWriter(tmp_path / "g", schema) as w:
        w.add_relation("likes", [[0, 1]])
        w.add_relation("hates", [[1, 0]])
    g = GraphDir.open(tmp_path / "g")
    csr = g.csr("in")
    with pytest.raises(ShoalInputError, match="two relations"):
        NeighborSampler(csr.indptr, csr.indices, [1], schema=g.schema)


def test_every_edge_s_relation_is_its_stored_one(igbh):
    s, csr = igbh.schema, igbh.csr("in")
    mb = NeighborSampler(csr.indptr, csr.indices, [-1], schema=s).sample(np.arange(300))
    blk, n_id = mb.blocks[0], np.asarray(mb.n_id)
    stored = _stored(igbh)
    src, dst = n_id[blk.edge_index[0].numpy()], n_id[blk.edge_index[1].numpy()]
    for a, b, r in zip(src.tolist(), dst.tolist(), blk.edge_type.tolist(), strict=True):
        assert stored[(a, b)][r] > 0


def test_a_single_relation_draws_as_the_untyped_graph(tmp_path):
    """One relation: the untyped kernels (same streams), the blocks only labelled."""
    schema = HeteroSchema.of({"a": 3, "b": 40}, [("b", "cites", "b")])
    rng = np.random.default_rng(0)
    e = rng.integers(3, 43, size=(300, 2))
    with HeteroGraphWriter(tmp_path / "g", schema) as w:
        w.add_relation("cites", e - 3)
    g = GraphDir.open(tmp_path / "g")
    csr = g.csr("in")
    seeds = np.arange(3, 20, dtype=np.int64)
    typed = NeighborSampler(csr.indptr, csr.indices, [3, 2], schema=g.schema).sample(seeds, 7)
    plain = NeighborSampler(csr.indptr, csr.indices, [3, 2]).sample(seeds, 7)
    assert np.array_equal(typed.n_id, plain.n_id)
    for x, y in zip(typed.blocks, plain.blocks, strict=True):
        assert np.array_equal(x.edge_index, y.edge_index)
        assert (x.edge_type == 0).all() and y.edge_type is None and y.src_type is None
    assert np.array_equal(typed.node_type.numpy(), g.schema.type_of(typed.n_id))


def test_an_untyped_sampler_labels_nothing(igbh):
    csr = igbh.csr("in")
    mb = NeighborSampler(csr.indptr, csr.indices, [2]).sample(np.arange(5))
    assert not mb.typed and mb.node_type is None


@pytest.mark.parametrize("fan", [[2, 2], [-1, -1]])
def test_excluded_edges_carry_no_message_and_the_rest_fill_the_fanout(igbh, fan):
    """A link batch's edges excluded from every hop: none is drawn, each relation still
    draws min(fanout, its other in-neighbours), and a row without exclusions draws as
    without any."""
    s, csr = igbh.schema, igbh.csr("in")
    ind, ptr = np.asarray(csr.indices), np.asarray(csr.indptr)
    sp = NeighborSampler(ptr, ind, fan, schema=s)
    papers = np.arange(0, 120, dtype=np.int64)
    # exclude every in-edge of the first 40 papers from papers (their cites), both ways
    ex = np.array([(int(u), int(v)) for v in papers[:40] for u in ind[ptr[v] : ptr[v + 1]]])
    ex = ex[s.type_of(ex[:, 0]) == s.type_of(np.array([0]))[0]]
    both = np.concatenate([ex, ex[:, ::-1]])
    mb = sp.sample(papers, seed=3, exclude=both)
    plain = sp.sample(papers, seed=3)
    n_id = np.asarray(mb.n_id)
    banned = {(int(a), int(b)) for a, b in both}
    stored = _stored(igbh)
    for blk in mb.blocks:
        src, dst = n_id[blk.edge_index[0].numpy()], n_id[blk.edge_index[1].numpy()]
        assert not any((int(a), int(b)) in banned for a, b in zip(src, dst, strict=True))
    last, et = mb.blocks[-1], mb.blocks[-1].edge_type.numpy()
    dst = n_id[last.edge_index[1].numpy()]
    for v in papers[:60]:
        nbrs = set(ind[ptr[v] : ptr[v + 1]].tolist())
        for r, e in enumerate(s.edge_types):
            if e.dst != "paper":
                continue
            deg = sum(stored[(u, int(v))][r] for u in nbrs if (u, int(v)) not in banned)
            k = fan[0]
            got = int(((dst == v) & (et == r)).sum())
            assert got == (deg if k < 0 else min(k, deg)), (v, e.relation)
    # the seeds' own rows without exclusions: the same draws as without any
    p_last = plain.blocks[-1]
    pn = np.asarray(plain.n_id)
    untouched = [v for v in papers[60:] if v not in set(both[:, 1].tolist())]
    assert untouched
    for v in untouched:
        a = sorted(n_id[last.edge_index[0].numpy()][dst == v].tolist())
        pd = pn[p_last.edge_index[1].numpy()]
        b = sorted(pn[p_last.edge_index[0].numpy()][pd == v].tolist())
        assert a == b
