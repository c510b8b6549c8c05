"""LDG (Stanton & Kliot, KDD 2012) over the CSR vertex stream."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.errors import ShoalInputError
from shoal.partition.base import get_partitioner


def _undirected(pairs):
    e = np.asarray(pairs)
    return np.concatenate([e, e[:, ::-1]])


def test_two_paths_hand_checked(make_graph):
    # nodes in id order, capacity 3: 0 -> part 0 (tie, fewer nodes); 1, 2 follow their
    # neighbour (weight 1 - |P|/C > 0); 3 sees no placed neighbour -> the emptier part 1; ...
    g = make_graph(_undirected([(0, 1), (1, 2), (3, 4), (4, 5)]), 6, directed=False)
    a = get_partitioner("ldg", num_parts=2).partition(g)
    assert a.node_part.tolist() == [0, 0, 0, 1, 1, 1]


def test_capacity_on_a_star(make_graph):
    # every leaf wants the centre's part; the hard capacity floor(1.1 * 6 / 2) = 3 stops it
    g = make_graph(_undirected([(0, i) for i in range(1, 6)]), 6, directed=False)
    a = get_partitioner("ldg", num_parts=2).partition(g)
    assert a.node_part.tolist() == [0, 0, 0, 1, 1, 1]


def test_directed_uses_both_directions(make_graph):
    g = make_graph([(1, 0), (2, 1), (4, 3), (5, 4)], 6, directed=True)
    a = get_partitioner("ldg", num_parts=2).partition(g)
    assert a.node_part.tolist() == [0, 0, 0, 1, 1, 1]


def test_train_capacity_and_chunks(make_graph):
    rng = np.random.default_rng(6)
    n = 200
    e = _undirected(rng.integers(0, n - 10, (800, 2)))  # 10 isolated nodes, some self-loops
    g = make_graph(e, n, directed=False)
    train = np.zeros(n, dtype=bool)
    train[:60] = True  # a dense id range: LDG alone would pile them up
    a = get_partitioner("ldg", num_parts=4).partition(g, train)
    b = get_partitioner("ldg", num_parts=4, chunk_edges=1).partition(g, train)
    assert np.array_equal(a.node_part, b.node_part)
    sizes = np.bincount(a.node_part, minlength=4)
    tsizes = np.bincount(a.node_part[train], minlength=4)
    assert sizes.max() <= 55 and tsizes.max() <= 16
    assert sizes.sum() == n


def test_errors(make_graph):
    g = make_graph([(0, 1)], 2)
    with pytest.raises(ShoalInputError, match="num_parts"):
        get_partitioner("ldg", num_parts=3).partition(g)
    with pytest.raises(ShoalInputError, match="train mask"):
        get_partitioner("ldg", num_parts=2).partition(g, np.zeros(5, dtype=bool))
    assert get_partitioner("ldg", num_parts=1).partition(g).node_part.tolist() == [0, 0]
