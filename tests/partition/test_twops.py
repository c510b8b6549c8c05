"""2PS-L (Mayer et al., ICDE 2022): clustering, cluster->part mapping, two-candidate scoring."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.errors import ShoalInputError
from shoal.partition.base import get_partitioner
from shoal.partition.twops import _cluster_chunk, _map_clusters


def _undirected(pairs):
    e = np.asarray(pairs)
    return np.concatenate([e, e[:, ::-1]])


def test_clustering_pass_hand_checked():
    # two triangles joined by the edge (2, 3); degrees 2,2,3,3,2,2; max volume 7
    src = np.array([0, 1, 0, 3, 4, 3, 2])
    dst = np.array([1, 2, 2, 4, 5, 5, 3])
    deg = np.array([2, 2, 3, 3, 2, 2])
    cluster = np.arange(6)
    vol = deg.copy()
    _cluster_chunk(src, dst, deg, cluster, vol, 7)
    # (0,1): vol 2 <= 2 -> 0 joins 1's cluster (vol 4); (1,2): 4 > 3 -> 2 joins (vol 7);
    # (3,4): 3 > 2 -> 4 joins 3 (vol 5); (4,5) -> 5 joins 3 (vol 7);
    # (2,3): both clusters at 7 <= 7 -> 2 moves (lower-or-equal side)
    # into cluster 3: volumes 4 and 10.
    assert cluster.tolist() == [1, 1, 3, 3, 3, 3]
    assert vol.sum() == deg.sum()
    assert vol[1] == 4 and vol[3] == 10


def test_mapping_largest_first():
    vol = np.array([0, 5, 0, 9, 3, 2])
    order = np.argsort(-vol, kind="stable")
    cmap = np.full(6, -1)
    _map_clusters(order, vol, 2, cmap)
    # 9 -> part 0; 5 -> part 1; 3 -> part 1 (5 < 9); 2 -> part 1 (8 < 9)
    assert cmap[[3, 1, 4, 5]].tolist() == [0, 1, 1, 1]


def test_two_communities(make_graph):
    # two 4-cliques joined by one edge: each clique ends up in one part
    a_ = [(i, j) for i in range(4) for j in range(i + 1, 4)]
    b_ = [(i + 4, j + 4) for i, j in a_]
    g = make_graph(_undirected(a_ + b_ + [(3, 4)]), 8, directed=False)
    a = get_partitioner("2ps-l", num_parts=2).partition(g)
    np_ = a.node_part
    assert len(set(np_[:4].tolist())) == 1 and len(set(np_[4:].tolist())) == 1
    assert np_[0] != np_[4]
    ep = np.asarray(a.edge_part)
    loads = np.bincount(ep, minlength=2)
    assert loads.max() <= np.ceil(1.05 * g.num_edges / 2)


def test_capacity_and_chunks(make_graph):
    rng = np.random.default_rng(5)
    e = rng.integers(0, 300, (4000, 2))
    g = make_graph(e, 305)
    for p in (3, 8):
        a = get_partitioner("2ps-l", num_parts=p).partition(g)
        b = get_partitioner("2ps-l", num_parts=p, chunk_edges=11).partition(g)
        ep = np.asarray(a.edge_part)
        assert np.array_equal(ep, np.asarray(b.edge_part))
        assert np.array_equal(a.node_part, b.node_part)
        assert ep.min() >= 0 and ep.max() < p
        assert np.bincount(ep, minlength=p).max() <= np.ceil(1.05 * 4000 / p)
        assert (a.node_part >= 0).all() and (a.node_part < p).all()


def test_config_errors():
    with pytest.raises(ShoalInputError, match="alpha"):
        get_partitioner("2ps-l", num_parts=2, alpha=0.9)
