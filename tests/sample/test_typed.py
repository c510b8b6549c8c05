"""Sampling a typed graph (the one sampler with a schema): a fanout per relation, drawn from the
graph's own edges, typed blocks."""

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
