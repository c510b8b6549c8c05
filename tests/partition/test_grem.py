"""GREM (Armada Alg. 1-2): the refinement step hand-checked, recursive bisection for any p."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.errors import ShoalInputError
from shoal.partition.base import get_partitioner
from shoal.partition.grem import refine_window


def _state(side, hist=None):
    """Sides and the history kept as one number per node, ``h0 - h1`` (from (h0, h1) pairs)."""
    side = np.array(side, dtype=np.int8)
    h = np.zeros((side.shape[0], 2)) if hist is None else np.array(hist, dtype=np.float64)
    return side, (h[:, 0] - h[:, 1]).astype(np.float32)


def test_new_node_follows_neighbours_and_capacity_blocks_a_move():
    side, hist = _state([0, 0, 0, 1, 1, -1])
    # window order of first appearance: 5, 0, 1, 3
    moved = refine_window(np.array([(5, 0), (5, 1), (5, 3)]), side, hist, (4, 4))
    # 5 sees two neighbours on side 0, one on side 1 -> side 0 (now full: 4 nodes)
    assert side.tolist() == [0, 0, 0, 1, 1, 0]
    # 3 now has its only window neighbour (5) on side 0: score (0 + 1) / 2 = 0.5 > 0, but
    # side 0 is full -> it stays
    assert moved == 0
    assert hist[5] == 2.0 - 1.0  # a new node's history is its first score
    assert hist[3] == 0.5 - 0.0  # averaged with the (empty) history
    assert (side >= 0).all()


def test_history_is_averaged_and_can_keep_a_node():
    # node 0 was on side 1 with strong history; its two window neighbours on side 0 have a
    # strong side-0 history (so they stay: s0 = (4 + 0) / 2 = 2 > s1 = (0 + 1) / 2)
    side, hist = _state([1, 0, 0], [[0, 4], [4, 0], [4, 0]])
    moved = refine_window(np.array([(0, 1), (0, 2)]), side, hist, (3, 3))
    # scores: s0 = (0 + 2) / 2 = 1, s1 = (4 + 0) / 2 = 2 -> stays on side 1
    assert moved == 0 and side[0] == 1
    assert hist[0] == 1.0 - 2.0
    # the next window halves the old weight again: s0 = (1 + 2) / 2 = 1.5, s1 = 1 -> moves
    moved = refine_window(np.array([(0, 1), (0, 2)]), side, hist, (3, 3))
    assert moved == 1 and side[0] == 0
    assert hist[0] == 1.5 - 1.0


def test_fixed_greedy_never_moves_assigned_nodes():
    side, hist = _state([1, 0, 0])
    moved = refine_window(np.array([(0, 1), (0, 2)]), side, hist, (3, 3), refine=False)
    assert moved == 0 and side.tolist() == [1, 0, 0]


def test_new_node_goes_to_other_side_when_full():
    side, hist = _state([0, 0, 1, -1])
    refine_window(np.array([(3, 0), (3, 1)]), side, hist, (2, 2))
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
    assert a.node_part.dtype == np.int32  # int16 groups inside, int32 parts out
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


def _reference_local(edges, grp, kparts):
    """Window-local ids in order of first appearance and each local node's neighbour list,
    over the window's intra-group edges of splitting groups (no self loops)."""
    order, nbrs = {}, []
    for u, v in edges.tolist():
        if u == v or grp[u] != grp[v] or kparts[grp[u]] < 2:
            continue
        for x in (u, v):
            if x not in order:
                order[x] = len(order)
                nbrs.append([])
        nbrs[order[u]].append(order[v])
        nbrs[order[v]].append(order[u])
    return list(order), [sorted(x) for x in nbrs]


@pytest.mark.parametrize(("n", "w"), [(30, 120), (1_000_000, 500)])
def test_window_local_ids_over_consecutive_windows(n, w):
    """The hash table that replaced the (N,) local-id array: consecutive windows on the same
    table (emptied after each) give the ids and CSR of a dict-based reference; a table that
    was not emptied correctly gives stale ids in the next window (random ids among 1M in a
    table of 2048 slots collide often)."""
    from shoal.partition.grem import _no_edge_caps, _no_edge_weights, _State

    rng = np.random.default_rng(n)
    grp = rng.integers(0, 3, n).astype(np.int16) * 2  # groups 0, 2, 4; 4 does not split
    kparts = np.array([2, 0, 2, 0, 1, 0], dtype=np.int32)
    st = _State(
        grp,
        kparts,
        np.full(n, -1, np.int8),
        np.zeros(n, np.float32),
        _no_edge_weights(n),
        np.zeros((6, 2), np.int64),
        np.ones((6, 2), np.int64),
        *_no_edge_caps(6),
        w,
    )
    for t in range(6):
        edges = rng.integers(0, n if t % 2 else n // 3 + 1, (w - t, 2)).astype(np.int32)
        for dtype in (np.int32, np.int64):
            nloc, indptr, indices = st.local(edges, dtype)
            nodes, nbrs = _reference_local(edges, grp, kparts)
            assert st.nodes[:nloc].tolist() == nodes
            got = [sorted(indices[indptr[a] : indptr[a + 1]].tolist()) for a in range(nloc)]
            assert got == nbrs
            assert (st.keys == -1).all()


def test_whole_components_beyond_the_metis_ones(make_graph, monkeypatch):
    """A seed window of more components than METIS gets: METIS bisects the largest ones,
    every other component goes whole to the side further below its share."""
    from shoal.partition import _grem_metis

    monkeypatch.setattr(_grem_metis, "METIS_COMPONENTS", 2)
    pairs = [(c * 8 + a, c * 8 + b) for c in range(6) for a in range(8) for b in range(8) if a != b]
    pairs = np.random.default_rng(0).permutation(np.array(pairs))
    g = make_graph(pairs, 48, directed=False)  # six disjoint 8-cliques, one window
    a = get_partitioner("grem", num_parts=2, window=0.999).partition(g)
    assert a.params["window_edges"] == g.num_edges
    assert np.bincount(a.node_part, minlength=2).tolist() == [24, 24]
    for c in range(6):
        assert len(set(a.node_part[c * 8 : (c + 1) * 8].tolist())) == 1


def test_component_sides_fill_the_side_below_its_share():
    from shoal.partition._grem_kernels import component_sides

    csize = np.array([5, 3, 3, 1], dtype=np.int64)
    done = np.array([True, False, False, False])
    # side 0 holds 5 (component 0, done); 3 -> side 1 (3), 3 -> side 1 (6 vs 8), 1 -> side 0
    assert component_sides(csize, done, 5, 0, 0.5)[1:].tolist() == [1, 1, 0]
    # side 0's share 1/3: the first 3 goes to side 1 (5 + 3 of 8 would be over 1/3)
    assert component_sides(csize, done, 5, 0, 1 / 3)[1] == 1


def test_paper_move_rule_moves_on_a_tie_strict_does_not():
    # nodes 0, 1, 3 on side 0, node 2 on side 1; window edges 0-1, 0-2; capacity 4 per side
    # strict: 0 ties (one neighbour each side) and stays; 1 stays (its neighbour 0 is on 0);
    # 2 (score (0 + 1) / 2 for side 0) moves to side 0, which has room
    side, hist = _state([0, 0, 1, 0])
    moved = refine_window(np.array([(0, 1), (0, 2)]), side, hist, (4, 4))
    assert (moved, side.tolist()) == (1, [0, 0, 0, 0])
    # paper (Alg. 2 assign): 0 ties -> the side with more room (1: 3 free against 1); then 1
    # (its neighbour 0 now on side 1: score -0.5) follows it; 2 (neighbour 0 on 1) stays
    side, hist = _state([0, 0, 1, 0])
    moved = refine_window(np.array([(0, 1), (0, 2)]), side, hist, (4, 4), move_rule="paper")
    assert (moved, side.tolist()) == (2, [1, 1, 1, 0])


def test_paper_move_rule_partitions(make_graph):
    rng = np.random.default_rng(1)
    e = rng.integers(0, 80, size=(400, 2))
    g = make_graph(np.concatenate([e, e[:, ::-1]]), 80, directed=False)
    a = get_partitioner(
        "grem", num_parts=4, move_rule="paper", exact_capacity=True, window=0.1
    ).partition(g)
    assert np.bincount(a.node_part, minlength=4).max() <= 20  # ceil(80 / 4), exact
    with pytest.raises(ShoalInputError, match="move_rule"):
        get_partitioner("grem", num_parts=2, move_rule="tie")


def test_seed_history_keeps_the_first_windows_counts():
    from shoal.partition import _grem_kernels as K

    nodes = np.array([0, 1, 2], dtype=np.int64)
    indptr = np.array([0, 2, 3, 4], dtype=np.int64)  # 0: {1, 2}; 1: {0}; 2: {0}
    indices = np.array([1, 2, 0, 0], dtype=np.int64)
    side = np.array([0, 0, 1], dtype=np.int8)
    hdiff = np.zeros(3, dtype=np.float32)
    grp = np.zeros(3, dtype=np.int32)
    K.seed_history(nodes, 3, indptr, indices, grp, np.array([2], np.int32), side, hdiff, False)
    assert hdiff.tolist() == [0.0, 1.0, 1.0]  # counts per side in the window: c0 - c1


@pytest.mark.parametrize("keep", [True, False])
def test_seed_history_option(make_graph, keep):
    rng = np.random.default_rng(2)
    e = rng.integers(0, 100, size=(600, 2))
    g = make_graph(np.concatenate([e, e[:, ::-1]]), 100, directed=False)
    a = get_partitioner("grem", num_parts=2, window=0.3, seed_history=keep).partition(g)
    assert a.params["seed_history"] is keep and a.node_part.min() >= 0


def test_seed_history_is_the_default():
    """Issue 31: the paper's rule (Alg. 1 lines 9-10) is the default; the option still
    switches it off (``--option seed_history=false``)."""
    from shoal.cli.partition import parse_options
    from shoal.partition.grem import GremConfig

    assert GremConfig(num_parts=2).seed_history is True
    assert get_partitioner("grem", num_parts=2).config.seed_history is True
    off = parse_options(["seed_history=false"], GremConfig)
    assert get_partitioner("grem", num_parts=2, **off).config.seed_history is False


def _seeded_then_pulled():
    """Window 1 (24 rows): two 4-cliques {0..3} and {4..7}, both directions stored, which
    METIS puts on opposite sides. Window 2 (4 rows): node 3 meets 4 and 5 of the other
    clique (two rows each)."""
    rows = []
    for base in (0, 4):
        rows += [(base + a, base + b) for a in range(4) for b in range(4) if a != b]
    rows += [(3, 4), (4, 3), (3, 5), (5, 3)]
    return np.array(rows)


@pytest.mark.parametrize("keep", [True, False])
def test_seed_history_keeps_a_seeded_node_with_its_clique(make_graph, keep):
    """Node 3's first-window counts (6 rows to its own clique) outweigh the second window's
    pull (4 rows to the other clique): with the seed history (the default) its averaged
    score, (6 - 4) / 2 = 1, keeps it with its clique; without, (0 - 4) / 2 < 0 moves it
    (the 1.5 balance leaves the other side room)."""
    g = make_graph(_seeded_then_pulled(), 8, directed=False)
    opts = {} if keep else {"seed_history": False}
    a = get_partitioner("grem", num_parts=2, window=24, balance=1.5, **opts).partition(g)
    part = a.node_part
    assert a.params["window_edges"] == 24 and a.params["refine_moves"] == [0 if keep else 1]
    assert len(set(part[:3].tolist())) == 1 and len(set(part[4:].tolist())) == 1
    assert part[0] != part[4]
    assert bool(part[3] == part[0]) is keep
