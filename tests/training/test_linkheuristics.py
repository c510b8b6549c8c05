"""Common neighbours and Adamic-Adar against a direct set computation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shoal.training.linkheuristics import heuristic_scores


def csr(edges, n):
    e = np.asarray(edges, dtype=np.int64)
    order = np.lexsort((e[:, 0], e[:, 1]))
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(e[:, 1], minlength=n), out=indptr[1:])
    return indptr, e[order, 0].astype(np.int32)


def test_hand_built():
    # 0-1, 0-2, 1-2, 2-3, 1-3, 3-4 (undirected, both directions stored)
    und = [(0, 1), (0, 2), (1, 2), (2, 3), (1, 3), (3, 4)]
    indptr, indices = csr(und + [(b, a) for a, b in und], 5)
    pairs = np.array([[0, 3], [1, 2], [0, 4], [4, 4]])
    cn = heuristic_scores(indptr, indices, pairs, "common-neighbours")
    assert cn.tolist() == [2.0, 2.0, 0.0, 1.0]  # N(0)&N(3) = {1, 2}; N(1)&N(2) = {0, 3}
    aa = heuristic_scores(indptr, indices, pairs, "adamic-adar")
    assert aa[0] == pytest.approx(2 / math.log(3))  # nodes 1 and 2 have degree 3
    assert aa[1] == pytest.approx(1 / math.log(2) + 1 / math.log(3))


def test_random_against_sets_with_repeats():
    rng = np.random.default_rng(0)
    n = 40
    e = rng.integers(0, n, size=(300, 2))
    e = np.concatenate([e, e[:20]])  # repeated edges count once
    indptr, indices = csr(e, n)
    nb = [set(indices[indptr[v] : indptr[v + 1]].tolist()) for v in range(n)]
    pairs = rng.integers(0, n, size=(100, 2))
    cn = heuristic_scores(indptr, indices, pairs, "common-neighbours")
    aa = heuristic_scores(indptr, indices, pairs, "adamic-adar")
    for (u, v), c, a in zip(pairs, cn, aa, strict=True):
        common = nb[u] & nb[v]
        assert c == len(common)
        deg = np.diff(indptr)
        assert a == pytest.approx(sum(1 / math.log(max(deg[w], 2)) for w in common))
    with pytest.raises(ValueError, match="valid names"):
        heuristic_scores(indptr, indices, pairs, "jaccard")
    assert heuristic_scores(indptr, indices, np.zeros((0, 2))).shape == (0,)
