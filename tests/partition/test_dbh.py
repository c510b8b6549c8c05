"""DBH (Xie et al., NIPS 2014): edges go to the hash of their lower-degree endpoint."""

from __future__ import annotations

import numpy as np

from shoal.partition.base import get_partitioner
from shoal.partition.dbh import _mix


def _h(v, seed, p):
    return int(_mix(np.uint64(v) ^ np.uint64(seed)) % np.uint64(p))


def test_lower_degree_endpoint(make_graph):
    # degrees: 0:3, 1:2, 2:2, 3:1
    g = make_graph([[0, 1], [0, 2], [0, 3], [2, 1]], 9)
    for seed in (0, 5):
        a = get_partitioner("dbh", num_parts=7, seed=seed).partition(g)
        # (2,1) is a degree tie -> lower id 1
        want = [_h(1, seed, 7), _h(2, seed, 7), _h(3, seed, 7), _h(1, seed, 7)]
        assert np.asarray(a.edge_part).tolist() == want


def test_both_directions_same_part(make_graph):
    rng = np.random.default_rng(0)
    e = rng.integers(0, 50, (300, 2))
    e = np.concatenate([e, e[:, ::-1]])
    g = make_graph(e, 50)
    a = get_partitioner("dbh", num_parts=4).partition(g)
    ep = np.asarray(a.edge_part)
    assert np.array_equal(ep[:300], ep[300:])


def test_hash_spreads_and_chunks(make_graph):
    rng = np.random.default_rng(3)
    e = rng.integers(0, 400, (3000, 2))
    g = make_graph(e, 410)
    a = get_partitioner("dbh", num_parts=4).partition(g)
    b = get_partitioner("dbh", num_parts=4, chunk_edges=13).partition(g)
    c = get_partitioner("dbh", num_parts=4, seed=1).partition(g)
    ep = np.asarray(a.edge_part)
    assert np.array_equal(ep, np.asarray(b.edge_part))
    assert np.array_equal(a.node_part, b.node_part)
    assert not np.array_equal(ep, np.asarray(c.edge_part))
    loads = np.bincount(ep, minlength=4)
    assert loads.min() > 0.15 * len(ep)
    assert (a.node_part >= 0).all() and (a.node_part < 4).all()
