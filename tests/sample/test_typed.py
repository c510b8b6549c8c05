"""The typed sampler: a fanout per relation, drawn from the graph's own edges, typed blocks."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from shoal.data.format import GraphDir
from shoal.data.hetero import HeteroSchema
from shoal.data.hetero_writer import HeteroGraphWriter
from shoal.data.synth.igbh import IGBHConfig, generate_igbh
from shoal.errors import ShoalInputError
from shoal.sample.typed import TypedNeighborSampler, edge_types_of


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
    sp = TypedNeighborSampler(csr.indptr, csr.indices, s, [2, 3], relation_fanouts=fan)
    papers = np.arange(200, dtype=np.int64)  # paper ids come first
    tb = sp.sample(papers, seed=5)
    stored = _stored(igbh)
    n_id = np.asarray(tb.n_id)
    assert np.array_equal(n_id[:200], papers)
    assert (tb.node_type.numpy() == s.type_of(n_id)).all()
    # the last block's targets are the seeds: per target and relation, min(fanout, degree)
    blk, et = tb.blocks[-1], tb.edge_types[-1].numpy()
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
    assert (tb.edge_types[0].numpy() >= 0).all()
    again = sp.sample(papers, seed=5)
    assert all(np.array_equal(x.edge_index, y.edge_index) for x, y in zip(tb.blocks, again.blocks))


def test_minus_one_takes_every_neighbour(igbh):
    s, csr = igbh.schema, igbh.csr("in")
    sp = TypedNeighborSampler(csr.indptr, csr.indices, s, [-1])
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
        TypedNeighborSampler(csr.indptr, csr.indices, g.schema, [1])


def test_an_edge_s_relation_is_its_endpoints_types(igbh):
    s = igbh.schema
    e = np.concatenate(list(igbh.edge_stream()))
    assert np.array_equal(edge_types_of(s, e[:, 0], e[:, 1]), np.asarray(igbh.relations()))


@pytest.mark.parametrize("cache_share", [0.0, 0.3, 1.0])
def test_typed_features_give_the_files_rows_whatever_the_cache(igbh, cache_share):
    from shoal.sample.typed import TypedFeatures

    s = igbh.schema
    csr = igbh.csr("in")
    deg = np.diff(np.asarray(csr.indptr))
    total = sum(t.count * 4 * 4 for t in s.node_types)
    feats = TypedFeatures(igbh, cache_bytes=int(cache_share * total), degrees=deg, threads=2)
    sp = TypedNeighborSampler(csr.indptr, csr.indices, s, [3, 3])
    needed: set[int] = set()
    for seed in range(3):
        tb = sp.sample(np.arange(seed * 40, seed * 40 + 40), seed)
        n_id, types = np.asarray(tb.n_id), tb.node_type.numpy()
        needed |= set(n_id.tolist())
        for t, (nt, x) in enumerate(zip(s.node_types, feats.gather(tb), strict=True)):
            ids = n_id[types == t] - nt.offset
            assert np.array_equal(x.numpy(), np.asarray(igbh.node_features(nt.name))[ids])
    io = feats.io()
    assert io["unique_rows"] == len(needed) and io["unique_bytes"] == 16 * len(needed)
    assert io["hits"] <= io["requested"]
    if cache_share == 1.0:
        assert io["hits"] == io["requested"] and io["bytes_read"] == 0
    if cache_share == 0.0:
        assert io["hits"] == 0 and io["rows_read"] >= len(needed)
    assert feats.io()["requested"] == 0  # counted since the last call
    feats.close()


def test_the_typed_cache_takes_the_highest_degrees_over_all_types():
    from shoal.sample.typed import typed_cache_choice

    s = HeteroSchema.of({"a": 3, "b": 2, "c": 2}, [("a", "r", "b")])
    deg = np.array([5, 0, 9, 7, 1, 8, 2])  # a: 0-2, b: 3-4, c: 5-6
    # rows of a cost 4 B, of b 8 B; c has no features (never cached)
    got = typed_cache_choice(s, [4, 8, 0], deg, cache_bytes=4 + 8 + 4)
    # by degree: 2 (a, 9), 5 (c: skipped), 3 (b, 7), 0 (a, 5): 4 + 8 + 4 bytes
    assert [k for k, _ in got] == [2, 1, 0]
    assert got[0][1].tolist() == [2, 0, 1] and got[1][1].tolist() == [0, 1]
    assert got[2][1].tolist() == [0, 1]
