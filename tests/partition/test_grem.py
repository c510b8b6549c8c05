"""GREM (Armada Alg. 1-2): the refinement step hand-checked, recursive bisection for any p."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.errors import ShoalInputError
from shoal.partition.base import get_partitioner
from shoal.partition.grem import refine_window


def _state(side, seen, hist=None):
    side = np.array(side, dtype=np.int8)
    hist = np.zeros((side.shape[0], 2)) if hist is None else np.array(hist, dtype=np.float64)
    return side, hist, np.array(seen, dtype=bool)


def test_new_node_follows_neighbours_and_capacity_blocks_a_move():
    side, hist, seen = _state([0, 0, 0, 1, 1, -1], [1, 1, 1, 1, 1, 0])
    # window order of first appearance: 5, 0, 1, 3
    moved = refine_window(np.array([(5, 0), (5, 1), (5, 3)]), side, hist, seen, (4, 4))
    # 5 sees two neighbours on side 0, one on side 1 -> side 0 (now full: 4 nodes)
    assert side.tolist() == [0, 0, 0, 1, 1, 0]
    # 3 now has its only window neighbour (5) on side 0: score (0 + 1) / 2 = 0.5 > 0, but
    # side 0 is full -> it stays
    assert moved == 0
    assert hist[5].tolist() == [2.0, 1.0]  # a new node's history is its first score
    assert hist[3].tolist() == [0.5, 0.0]  # averaged with the (empty) history
    assert seen.all()


def test_history_is_averaged_and_can_keep_a_node():
    # node 0 was on side 1 with strong history; its two window neighbours on side 0 have a
    # strong side-0 history (so they stay: s0 = (4 + 0) / 2 = 2 > s1 = (0 + 1) / 2)
    side, hist, seen = _state([1, 0, 0], [1, 1, 1], [[0, 4], [4, 0], [4, 0]])
    moved = refine_window(np.array([(0, 1), (0, 2)]), side, hist, seen, (3, 3))
    # scores: s0 = (0 + 2) / 2 = 1, s1 = (4 + 0) / 2 = 2 -> stays on side 1
    assert moved == 0 and side[0] == 1
    assert hist[0].tolist() == [1.0, 2.0]
    # the next window halves the old weight again: s0 = (1 + 2) / 2 = 1.5, s1 = 1 -> moves
    moved = refine_window(np.array([(0, 1), (0, 2)]), side, hist, seen, (3, 3))
    assert moved == 1 and side[0] == 0
    assert hist[0].tolist() == [1.5, 1.0]


def test_fixed_greedy_never_moves_assigned_nodes():
    side, hist, seen = _state([1, 0, 0], [1, 1, 1])
    moved = refine_window(np.array([(0, 1), (0, 2)]), side, hist, seen, (3, 3), refine=False)
    assert moved == 0 and side.tolist() == [1, 0, 0]


def test_new_node_goes_to_other_side_when_full():
    side, hist, seen = _state([0, 0, 1, -1], [1, 1, 1, 0])
    refine_window(np.array([(3, 0), (3, 1)]), side, hist, seen, (2, 2))
    assert side[3] == 1


def _cliques(k: int, size: int):
    pairs = []
    for c in range(k):
        base = c * size
        pairs += [(base + a, base + b) for a in range(size) for b in range(size) if a != b]
        nxt = ((c + 1) % k) * size
        pairs += [(base, nxt), (nxt, base)]
    return pairs, k * size


@pytest.mark.parametrize("p", [2, 3, 5])
def test_recursive_bisection_any_p(make_graph, p):
    pairs, n = _cliques(p, 8)
    # shuffled stream: each half-window sees part of every clique (the METIS seed of a
    # window holding one clique only would have to split it)
    pairs = np.random.default_rng(0).permutation(np.array(pairs))
    g = make_graph(pairs, n, directed=False)
    a = get_partitioner("grem", num_parts=p, window=0.5).partition(g)
    sizes = np.bincount(a.node_part, minlength=p)
    assert sizes.tolist() == [8] * p  # every clique becomes one part
    for c in range(p):
        assert len(set(a.node_part[c * 8 : (c + 1) * 8].tolist())) == 1
    assert a.params["window_edges"] == int(np.ceil(0.5 * g.num_edges))


def test_exact_capacity_and_greedy_start(make_graph):
    pairs, n = _cliques(4, 6)
    g = make_graph(pairs, n, directed=False)
    a = get_partitioner(
        "grem", num_parts=4, window=10, exact_capacity=True, metis_seed=False
    ).partition(g)
    assert np.bincount(a.node_part, minlength=4).max() <= 6


def test_config_errors():
    with pytest.raises(ShoalInputError, match="window"):
        get_partitioner("grem", num_parts=2, window=0)
