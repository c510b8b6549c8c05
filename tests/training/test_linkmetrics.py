"""Link-prediction metrics: hand-computed ranks, ties averaged as OGB's evaluator does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.training.linkmetrics import hits_at_k_global, link_ranks, mrr_hits


def test_ranks_by_hand_with_ties():
    pos = np.array([0.9, 0.5, 0.2, 0.7])
    neg = np.array(
        [
            [0.1, 0.2, 0.3],  # above all: rank 1
            [0.5, 0.5, 0.1],  # two ties: optimistic 0, pessimistic 2 -> rank 2
            [0.3, 0.4, 0.9],  # below all: rank 4
            [0.8, 0.7, 0.1],  # one above, one tie: (1 + 2) / 2 + 1 = 2.5
        ]
    )
    assert link_ranks(pos, neg).tolist() == [1.0, 2.0, 4.0, 2.5]
    m = mrr_hits(torch.tensor(pos), torch.tensor(neg), ks=(1, 2, 3))
    assert m["mrr"] == pytest.approx((1 + 1 / 2 + 1 / 4 + 1 / 2.5) / 4)
    assert (m["hits@1"], m["hits@2"], m["hits@3"]) == (0.25, 0.5, 0.75)


def test_constant_scores_rank_in_the_middle():
    r = link_ranks(np.zeros(3), np.zeros((3, 100)))
    assert r.tolist() == [51.0] * 3  # not 1: a constant scorer earns nothing


def test_against_a_direct_loop():
    rng = np.random.default_rng(0)
    pos = rng.integers(0, 5, size=50).astype(float)  # many ties
    neg = rng.integers(0, 5, size=(50, 20)).astype(float)
    want = []
    for s, row in zip(pos, neg):
        above = sum(1 for x in row if x > s)
        ties = sum(1 for x in row if x == s)
        want.append(above + ties / 2 + 1)
    assert np.allclose(link_ranks(pos, neg), want)
    assert mrr_hits(pos, neg)["mrr"] == pytest.approx(np.mean(1 / np.array(want)))


def test_global_hits_and_edge_cases():
    neg = np.array([0.1, 0.5, 0.3, 0.9])
    assert hits_at_k_global(np.array([0.6, 0.95, 0.4]), neg, k=2) == pytest.approx(2 / 3)
    assert hits_at_k_global(np.array([0.0]), neg, k=10) == 1.0  # fewer negatives than k
    assert np.isnan(mrr_hits(np.zeros(0), np.zeros((0, 5)))["mrr"])
    with pytest.raises(ValueError, match="NaN"):
        link_ranks(np.array([np.nan]), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="need"):
        link_ranks(np.zeros(2), np.zeros((3, 2)))
