"""In-memory references (METIS, KaMinPar) and the trivial ones (hash, random)."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.partition.base import REGISTRY, available, get_partitioner
from shoal.partition.metis import symmetric_csr
from shoal.partition.run import run_partition


def _cliques(k: int, size: int):
    pairs = []
    for c in range(k):
        b = c * size
        pairs += [(b + i, b + j) for i in range(size) for j in range(size) if i != j]
        nb = ((c + 1) % k) * size
        pairs += [(b, nb), (nb, b)]
    return pairs, k * size


def test_symmetric_csr_is_simple(make_graph):
    # directed input with a self-loop and a duplicate: CSR holds both directions once each
    g = make_graph([(0, 1), (0, 1), (1, 2), (2, 2)], 4)
    indptr, indices = symmetric_csr(g)
    assert indptr.tolist() == [0, 1, 3, 4, 4]
    assert indices.tolist() == [1, 0, 2, 1]


@pytest.mark.parametrize("algo", ["metis", "kaminpar"])
def test_references_find_cliques(make_graph, algo):
    if algo not in available():
        pytest.skip(f"{algo} not installed")
    pairs, n = _cliques(4, 10)
    g = make_graph(pairs, n, directed=False)
    cls = get_partitioner(algo, num_parts=4)
    assert cls.in_memory
    a = cls.partition(g)
    for c in range(4):
        assert len(set(a.node_part[c * 10 : (c + 1) * 10].tolist())) == 1
    assert sorted(np.bincount(a.node_part, minlength=4).tolist()) == [10] * 4


def test_metis_multi_constraint_training_balance(make_graph):
    # two cliques; every training node is in clique 0: a plain 2-way cut puts them all in one
    # part; through the pipeline the training nodes end up balanced either way
    pairs, n = _cliques(2, 20)
    g = make_graph(pairs, n, directed=False, train=np.arange(0, 20, 2))
    mask = g.mask("train")
    plain = get_partitioner("metis", num_parts=2).partition(g, mask)
    assert np.bincount(plain.node_part[mask], minlength=2).max() == 10
    multi = get_partitioner("metis", num_parts=2, multi_constraint=True).partition(g, mask)
    assert isinstance(multi.params["multi_constraint_met"], bool)
    r = run_partition(g, "metis", num_parts=2, multi_constraint=True)
    assert np.bincount(r.assignment.node_part[mask], minlength=2).max() <= 5
    assert r.metrics["train_balance"] == 1.0


def test_hash_and_random_are_seeded(make_graph):
    g = make_graph([(0, 1)], 1000)
    for algo in ("hash", "random"):
        a = get_partitioner(algo, num_parts=4, seed=1).partition(g).node_part
        b = get_partitioner(algo, num_parts=4, seed=1).partition(g).node_part
        c = get_partitioner(algo, num_parts=4, seed=2).partition(g).node_part
        assert np.array_equal(a, b) and not np.array_equal(a, c)
        sizes = np.bincount(a, minlength=4)
        assert sizes.min() > 200  # roughly uniform


def test_registry_lists_every_algorithm():
    assert set(REGISTRY) == set(
        "spring grem hdrf dbh greedy 2ps-l ldg fennel hash random metis kaminpar".split()
    )
    assert {"spring", "grem", "hash", "random", "metis"} <= set(available())
