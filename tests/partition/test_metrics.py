"""Streaming metrics, hand-checked on tiny graphs."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.partition.metrics import partition_metrics


def test_hand_checked_directed(make_graph):
    # 0->1 (same part), 1->2 (cut), 2->0 (cut), 2->3 (same), plus a duplicate 1->2
    g = make_graph([(0, 1), (1, 2), (2, 0), (2, 3), (1, 2)], 4)
    part = np.array([0, 0, 1, 1], dtype=np.int32)
    m = partition_metrics(g, part, 2)
    assert m["cut_edges"] == 3
    assert m["edge_cut"] == pytest.approx(3 / 5)
    # halo pairs: (1 in part 1) and (2 in part 0); the duplicate adds nothing -> (4 + 2) / 4
    assert m["replication_factor"] == pytest.approx(1.5)
    # in-edges of core nodes: part 0 owns 0, 1 (dst of 2->0, 0->1) = 2; part 1: 3 edges
    assert m["part_in_edges"] == [2, 3]
    assert m["edge_balance"] == pytest.approx(3 / 2.5)
    assert m["node_balance"] == pytest.approx(1.0)
    assert m["train_balance"] == 1.0


def test_bitmap_groups_give_the_same_answer(make_graph):
    rng = np.random.default_rng(0)
    g = make_graph(rng.integers(0, 50, (300, 2)), 50)
    part = rng.integers(0, 5, 50).astype(np.int32)
    a = partition_metrics(g, part, 5)
    b = partition_metrics(g, part, 5, bitmap_bytes=1, chunk_edges=7)  # one part per pass
    assert a == b
    # brute force
    e = g.edge_stream().memmap()
    pairs = {(int(u), int(part[v])) for u, v in e if part[u] != part[v]}
    assert a["replication_factor"] == pytest.approx((50 + len(pairs)) / 50)


def test_vertex_cut_rf_and_train(make_graph):
    # edges 0->1, 1->2 in part 0; 2->0, 2->3 in part 1; node 4 isolated
    g = make_graph([(0, 1), (1, 2), (2, 0), (2, 3)], 5)
    part = np.array([0, 0, 1, 1, 1], dtype=np.int32)
    ep = np.array([0, 0, 1, 1], dtype=np.int16)
    train = np.array([True, True, True, False, False])
    m = partition_metrics(g, part, 2, edge_part=ep, train_mask=train)
    # part 0 holds {0, 1, 2}, part 1 holds {0, 2, 3}, node 4 counts once: 7 / 5
    assert m["vertex_cut_rf"] == pytest.approx(7 / 5)
    assert m["part_train"] == [2, 1]
    assert m["train_balance"] == pytest.approx(2 / 1.5)


def test_no_edges(make_graph):
    g = make_graph(np.zeros((0, 2)), 3)
    m = partition_metrics(g, np.array([0, 1, 1], dtype=np.int32), 2)
    assert m["edge_cut"] == 0.0 and m["replication_factor"] == 1.0
    assert m["edge_balance"] == 1.0
    assert m["node_balance"] == pytest.approx(2 / 1.5)
