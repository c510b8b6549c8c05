"""SPRING (SDT-GNN Alg. 1): merge and placement steps hand-checked."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.errors import ShoalInputError
from shoal.partition.base import get_partitioner
from shoal.partition.spring import merge_clusters, place_clusters


def test_merge_smallest_first_into_richest_neighbour_cluster():
    # clusters (ids are node ids): A = {0, 1, 2} (id 0), B = {3, 4} (id 3), C = {5} (id 5)
    cluster = np.array([0, 0, 0, 3, 3, 5], dtype=np.int64)
    deg = np.array([5, 1, 1, 2, 4, 1], dtype=np.int64)
    # representatives (highest degree): A -> 0, B -> 4, C -> 5
    rich = np.array([4, 0, 0, 4, 0, 3], dtype=np.int64)
    # C (size 1) goes first: rep 5's richest neighbour 3 is in B -> B = {3, 4, 5} (3 <= 4)
    # B (size 2 before, now 3): rep 4 -> richest 0 in A; 3 + 3 = 6 > 4: no merge
    # A (size 3): rep 0 -> richest 4 in B; 3 + 3 > 4: no merge
    final, merges = merge_clusters(cluster, deg, rich, bound=4)
    assert merges == 1
    assert final.tolist() == [0, 0, 0, 3, 3, 3]
    # with a larger bound, B (3 nodes) merges into A
    final, merges = merge_clusters(cluster, deg, rich, bound=6)
    assert merges == 2
    assert final.tolist() == [0] * 6


def test_merge_skips_own_cluster_and_missing_neighbour():
    cluster = np.array([0, 0, 2], dtype=np.int64)
    deg = np.array([2, 1, 0], dtype=np.int64)
    rich = np.array([1, 0, -1], dtype=np.int64)  # 0's richest is inside its cluster; 2 isolated
    final, merges = merge_clusters(cluster, deg, rich, bound=10)
    assert merges == 0
    assert final.tolist() == [0, 0, 2]


def test_placement_largest_first_least_loaded():
    # clusters of sizes 4 (id 0), 3 (id 4), 2 (id 7), 1 (id 9) into 2 parts:
    # 4 -> part 0; 3 -> part 1; 2 -> part 1 (3 < 4); 1 -> part 0 (4 < 5)
    final = np.array([0] * 4 + [4] * 3 + [7] * 2 + [9], dtype=np.int64)
    part = place_clusters(final, 2)
    assert part.tolist() == [0] * 4 + [1] * 3 + [1] * 2 + [0]


def test_two_cliques_are_separated(make_graph):
    pairs = [(a, b) for a in range(5) for b in range(5) if a != b]
    pairs += [(a + 5, b + 5) for a, b in pairs] + [(4, 5), (5, 4)]
    g = make_graph(pairs, 10, directed=False)
    a = get_partitioner("spring", num_parts=2).partition(g)
    assert len(set(a.node_part[:5].tolist())) == 1
    assert len(set(a.node_part[5:].tolist())) == 1
    assert a.node_part[0] != a.node_part[9]


def test_config_errors():
    with pytest.raises(ShoalInputError, match="beta"):
        get_partitioner("spring", num_parts=2, beta=0.5)
    with pytest.raises(ShoalInputError, match="tau_factor"):
        get_partitioner("spring", num_parts=2, tau_factor=0)


def test_paper_representative_rule_differs_by_hand():
    # A = {0, 1, 2} (id 0), B = {3, 4} (id 3)
    cluster = np.array([0, 0, 0, 3, 3], dtype=np.int64)
    deg = np.array([4, 2, 1, 6, 1], dtype=np.int64)
    rich = np.array([1, 3, 0, 0, 3], dtype=np.int64)
    # shoal: rep(A) = 0 (degree 4), its richest (1) is in A: A stays; rep(B) = 3, richest 0 in
    # A: B (visited first, size 2) merges into A
    final, merges = merge_clusters(cluster, deg, rich, bound=5, representative="degree")
    assert (merges, final.tolist()) == (1, [0] * 5)
    # paper: rep(A) = 1 (its richest, 3, has degree 6), rep(B) = 4 (richest 3, degree 6, in
    # B: B stays); A then merges into B
    final, merges = merge_clusters(cluster, deg, rich, bound=5, representative="richest")
    assert (merges, final.tolist()) == (1, [3] * 5)


def test_paper_rule_updates_the_merged_representative():
    # A = {0, 1} (id 0), C = {2} (id 2), D = {3, 4} (id 3); visited C, A, D
    cluster = np.array([0, 0, 2, 3, 3], dtype=np.int64)
    deg = np.array([2, 7, 1, 3, 1], dtype=np.int64)
    rich = np.array([3, -1, 1, 4, 3], dtype=np.int64)
    # rep(A) = 0 (its richest, 3, has degree 3; 1 has none); rep(C) = 2 (richest 1, degree 7)
    # C merges into A, whose representative becomes 2 (7 > 3): pointing into A, so A then
    # stays (without the update, rep 0 would take A into D); rep(D) = 4 -> 3, inside D
    final, merges = merge_clusters(cluster, deg, rich, bound=10, representative="richest")
    assert (merges, final.tolist()) == (1, [0, 0, 0, 3, 3])


def test_representative_option_partitions_and_is_validated(make_graph):
    rng = np.random.default_rng(0)
    e = rng.integers(0, 60, size=(300, 2))
    g = make_graph(np.concatenate([e, e[:, ::-1]]), 60, directed=False)
    for rule in ("degree", "richest"):
        a = get_partitioner("spring", num_parts=3, representative=rule).partition(g)
        assert a.node_part.min() >= 0 and a.node_part.max() < 3
        assert a.params["representative"] == rule
    with pytest.raises(ShoalInputError, match="representative=richest"):
        get_partitioner("spring", num_parts=2, representative="paper")
