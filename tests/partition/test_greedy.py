"""Greedy / PowerGraph (Gonzalez et al., OSDI 2012, Section 5.2): the four placement cases."""

from __future__ import annotations

import numpy as np

from shoal.partition.base import get_partitioner


def test_four_cases_hand_checked(make_graph):
    # degrees 0:2, 1:2, 2:3, 3:1.
    # (0,1) case 4 -> least loaded, part 0.  (2,3) case 4 -> part 1.
    # (1,2) disjoint sets; unassigned edges left: 1 -> 1, 2 -> 2 -> a part of A(2) = {1}.
    # (0,2) disjoint; left: 0 -> 1, 2 -> 1 (tie -> first endpoint) -> A(0) = {0}.
    g = make_graph([[0, 1], [2, 3], [1, 2], [0, 2]], 4)
    a = get_partitioner("greedy", num_parts=2).partition(g)
    assert np.asarray(a.edge_part).tolist() == [0, 1, 1, 0]


def test_intersection_beats_load(make_graph):
    # case 1: the repeated edge stays on the shared part although part 1 is empty
    g = make_graph([[0, 1], [0, 1], [1, 0]], 2)
    a = get_partitioner("greedy", num_parts=2).partition(g)
    assert np.asarray(a.edge_part).tolist() == [0, 0, 0]


def test_case3_one_side_known(make_graph):
    # (0,1) -> 0; (2,3) -> 1; (0,4): only 0 known -> A(0) = {0} although part 0 is heavier
    g = make_graph([[0, 1], [2, 3], [0, 4]], 5)
    a = get_partitioner("greedy", num_parts=2).partition(g)
    assert np.asarray(a.edge_part).tolist() == [0, 1, 0]


def test_consistency_and_chunks(make_graph):
    rng = np.random.default_rng(4)
    e = rng.integers(0, 100, (1500, 2))
    g = make_graph(e, 104)
    a = get_partitioner("greedy", num_parts=4).partition(g)
    b = get_partitioner("greedy", num_parts=4, chunk_edges=3).partition(g)
    ep = np.asarray(a.edge_part)
    assert np.array_equal(ep, np.asarray(b.edge_part))
    assert np.array_equal(a.node_part, b.node_part)
    assert ep.shape == (1500,) and ep.min() >= 0 and ep.max() < 4
    assert (a.node_part >= 0).all() and (a.node_part < 4).all()
    # every node's owner holds at least one of its edges (or the node has none)
    for v in range(104):
        mine = ep[(e[:, 0] == v) | (e[:, 1] == v)]
        if mine.size:
            assert a.node_part[v] in set(mine.tolist())
