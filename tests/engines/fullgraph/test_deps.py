"""NeutronStar's dependency split (Algorithm 4, Eq. 1-2) and the master-mirror exchange."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.engines.fullgraph.depcomm import RowExchange, ring_peers
from shoal.engines.fullgraph.deps import Costs, RemoteCSR, build_sets, split_dependencies
from tests.distributed.helpers import run_world

# local nodes 0, 1; remote 10, 11, 12, 20, 21. In-edges of the remote nodes:
#   10 <- 0          (a cheap subtree: one local in-neighbour)
#   11 <- 20, 21, 1  (two remote in-neighbours)
#   12 <- 20         (shares 20 with 11)
STRUCT = RemoteCSR(np.array([10, 11, 12]), np.array([0, 1, 4, 5]), np.array([0, 20, 21, 1, 20]))
HALO = np.array([10, 11, 12])
LOCAL = {0, 1}.__contains__
DIMS = [4, 2, 3]  # features, hidden, classes: 2 layers


def test_remote_csr_neighbours_and_merge():
    assert STRUCT.neighbours(np.array([11, 10])).tolist() == [20, 21, 1, 0]
    assert STRUCT.degree(11) == 3
    more = RemoteCSR(np.array([5]), np.array([0, 2]), np.array([7, 8]))
    m = STRUCT.merge(more)
    assert m.ids.tolist() == [5, 10, 11, 12] and m.neighbours(np.array([5, 12])).tolist() == [
        7,
        8,
        20,
    ]
    with pytest.raises(KeyError):
        STRUCT.neighbours(np.array([99]))


def test_eq1_costs_and_greedy_choice():
    # layer 2: t_r(u) = (|{u}| T_v + in-degree(u) T_e) d1 with d1 = 2, excluding what is cached;
    # T_v = T_e = 1: t_r(10) = (1 + 1) 2 = 4, t_r(12) = 4, t_r(11) = (1 + 3) 2 = 8; t_c = T_c d1
    costs = Costs(1.0, 1.0, 2.5)  # t_c = 5: caches 10 and 12, communicates 11
    cached, have, size = split_dependencies(
        HALO, STRUCT, DIMS, costs, is_local=LOCAL, memory_limit=1e9
    )
    assert cached[0].tolist() == [10, 11, 12]  # layer 1: t_r = 0, every halo feature replicated
    assert cached[1].tolist() == [10, 12]
    assert have[1] == {10, 12} and have[0] == {10, 11, 12, 20}  # 12's subtree adds 20
    s = build_sets(HALO, cached, have)
    assert s.rep[2].tolist() == [] and s.rep[1].tolist() == [10, 12]
    assert s.rep[0][:2].tolist() == [10, 12] and sorted(s.rep[0].tolist()) == [10, 11, 12, 20]
    assert [c.tolist() for c in s.com] == [[], [11]]  # layer 2 fetches 11's hidden row
    assert [c.tolist() for c in s.communicated] == [[], [11]]
    # rows: level 0 features (4 dims, 4 B) of 4 nodes; level 1 (2 dims, twice) of 2 nodes;
    # 12 B per aggregated edge of the level-1 nodes (their in-degree + the self row)
    assert size == 4 * 4 * 4 + 2 * 2 * 4 * 2 + 12 * ((1 + 1) + (1 + 1))


def test_modes_and_the_memory_limit():
    costs = Costs(1.0, 1.0, 100.0)  # everything is cheaper to cache
    comm, have, size = split_dependencies(
        HALO, STRUCT, DIMS, costs, is_local=LOCAL, memory_limit=1e9, mode="comm"
    )
    assert [len(c) for c in comm] == [0, 0] and size == 0
    assert [c.tolist() for c in build_sets(HALO, comm, have).com] == [[10, 11, 12]] * 2
    cache, have, _ = split_dependencies(
        HALO, STRUCT, DIMS, Costs(1, 1, 0), is_local=LOCAL, memory_limit=1e9, mode="cache"
    )
    assert [c.tolist() for c in cache] == [[10, 11, 12]] * 2  # t_c ignored
    assert sorted(build_sets(HALO, cache, have).rep[0].tolist()) == [10, 11, 12, 20, 21]
    # a limit that holds the layer-1 features (3 rows, 48 B) and 10's level-1 row (16 + 24 B)
    # but not 12's: the split stops there (lines 14-15), the rest is communicated
    part, have, size = split_dependencies(
        HALO, STRUCT, DIMS, costs, is_local=LOCAL, memory_limit=48 + 40 + 10
    )
    assert [c.tolist() for c in part] == [[10, 11, 12], [10]] and size == 88
    assert build_sets(HALO, part, have).com[1].tolist() == [11, 12]


def test_ring_order():
    # rank i's j-th chunk goes to (i + j + 1) mod m: in slot j no two ranks share a destination
    for m in (2, 3, 4, 5):
        for j in range(m - 1):
            dests = [ring_peers(i, m)[j][0] for i in range(m)]
            assert sorted(dests) == list(range(m))
            assert all(ring_peers(d, m)[j][1] == i for i, d in enumerate(dests))
    assert ring_peers(1, 4, ring=False) == [(0, 0), (2, 2), (3, 3)]


def _pull(rank: int, world: int, ring: bool):
    # rank r holds rows r*100 + (0..4); rank r mirrors row (r + 1) % 5 of every other rank, and
    # row 0 twice on the next rank (a row mirrored twice gets both gradients)
    h = (rank * 100 + torch.arange(5.0)).unsqueeze(1).repeat(1, 2).requires_grad_()
    send = [
        np.array([(p + 1) % 5] + ([0] if p == (rank + 1) % world else []))
        if p != rank
        else np.empty(0, np.int64)
        for p in range(world)
    ]
    recv = [0 if p == rank else 1 + (rank == (p + 1) % world) for p in range(world)]
    ex = RowExchange(send, recv, rank=rank, world=world, tag=0, ring=ring)
    transfer, got = ex.rows(h)
    in_flight = transfer.posted - transfer.finished
    try:  # the ring posts a slot only once the previous one is in
        transfer.post()
        refused = False
    except RuntimeError:
        refused = True
    transfer.finish_all()
    weights = torch.arange(1.0, got.shape[0] + 1).unsqueeze(1).repeat(1, 2)
    grad = ex.push_gradients(weights, 5)
    return got[:, 0].tolist(), grad[:, 0].tolist(), in_flight, refused, transfer.num_slots


@pytest.mark.parametrize("world, ring", [(2, True), (4, True), (4, False)])
def test_pull_rows_forward_and_gradient_sums(world, ring):
    res = run_world(_pull, world, ring)
    for _, _, in_flight, refused, slots in res:
        assert in_flight == 1 and slots == (world - 1 if ring else 1)
        assert refused == (slots > 1)
    res = [r[:2] for r in res]
    for rank, (got, _) in enumerate(res):
        want = []
        for p in range(world):
            if p != rank:
                want += [p * 100 + (rank + 1) % 5] + ([p * 100] if rank == (p + 1) % world else [])
        assert got == want
    # the gradient of a row = the sum of the weights its mirrors got on every other rank
    for rank, (_, grad) in enumerate(res):
        want = [0.0] * 5
        for q, (got_q, _) in enumerate(res):
            if q == rank:
                continue
            for i, v in enumerate(got_q):
                if v // 100 == rank:
                    want[int(v) % 100] += i + 1
        assert grad == want
