"""disagg engine planning (Armada Section 5): roles, the coordinator's split, phases, schedule."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.engines.disagg.plan import (
    Roles,
    assign_parts,
    chunk_counts,
    epoch_schedule,
    link_schedule,
    parts_in_order,
    phases,
)


def test_roles_layout_and_feeders():
    r = Roles(5, 3)
    assert r.compute_ranks == [0, 1] and r.batch_ranks == [2, 3, 4] and r.coordinator == 2
    assert [r.compute_of(b) for b in range(3)] == [0, 1, 0]
    assert r.feeders(0) == [0, 2] and r.feeders(1) == [1]
    assert r.is_batch(2) and not r.is_batch(1) and r.batch_index(4) == 2


@pytest.mark.parametrize("world, b", [(1, 1), (2, 0), (2, 2), (5, 2)])
def test_roles_refuse_impossible_splits(world, b):
    with pytest.raises(ValueError):
        Roles(world, b)


def test_coordinator_split_is_disjoint_random_and_per_epoch():
    a0 = assign_parts(10, 3, seed=1, epoch=0)
    assert sorted(np.bincount(a0, minlength=3).tolist()) == [3, 3, 4]
    assert np.array_equal(a0, assign_parts(10, 3, seed=1, epoch=0))
    assert any(not np.array_equal(a0, assign_parts(10, 3, seed=1, epoch=e)) for e in (1, 2, 3))
    orders = [parts_in_order(a0, b, 1, 0) for b in range(3)]
    assert sorted(p for o in orders for p in o) == list(range(10))
    assert all(a0[p] == b for b, o in enumerate(orders) for p in o)


def test_phases_fill_the_budget_then_swap_one_at_a_time():
    sizes = np.array([10, 10, 10, 10, 50])
    assert phases([0, 1, 2, 3], sizes, 25) == [[0, 1], [2], [3]]
    assert phases([4, 0, 1], sizes, 25) == [[4], [0], [1]]  # at least one part
    assert phases([0, 1, 2, 3], sizes, 1000) == [[0, 1, 2, 3]]
    assert phases([0, 1, 2, 3], sizes, 1000, max_parts=3) == [[0, 1, 2], [3]]
    assert phases([], sizes, 10) == []


def test_chunk_counts_cover_every_nonempty_group():
    c = chunk_counts(np.array([100, 0, 1, 49]), 6)
    assert c.sum() == 6 and c[1] == 0 and c[2] >= 1 and c[0] > c[3]
    with pytest.raises(ValueError):
        chunk_counts(np.array([1, 1, 1]), 2)


@pytest.mark.parametrize("world, b, G", [(2, 1, 1), (3, 2, 1), (4, 2, 2), (5, 3, 1), (4, 3, 2)])
def test_schedule_balances_iterations_and_covers_every_seed(world, b, G):
    roles = Roles(world, b)
    rng = np.random.default_rng(world * 10 + b)
    phase_seeds = [rng.integers(0, 40, size=rng.integers(1, 4)).tolist() for _ in range(b)]
    phase_seeds[0][0] = 0  # a phase without seeds
    s = epoch_schedule(phase_seeds, roles, batch_size=8, replicas=G)
    assert len({len(o) for o in s.order}) == 1  # same iterations on every compute worker
    for j in range(b):
        assert s.sizes[j].sum() == sum(phase_seeds[j])
        assert len(s.sizes[j]) == s.batches[j] * G
        assert s.phase_batches[j].sum() == s.batches[j]
        # one global batch at least per phase with seeds, none for an empty one (a worker
        # without seeds sends its compute worker's share as empty batches)
        assert sum(phase_seeds[j]) == 0 or all(
            (k >= 1) == (x > 0) for k, x in zip(s.phase_batches[j], phase_seeds[j])
        )
    pairs = sorted(p for o in s.order for p in o)
    assert pairs == sorted((j, k) for j in range(b) for k in range(s.batches[j]))
    R = max(len(roles.feeders(c)) for c in roles.compute_ranks)
    for c, o in enumerate(s.order):
        assert all(roles.compute_of(j) == c for j, _ in o)
        # iteration i is prepared in round i // R on every compute worker
        assert all(k // s.per_round[j] == i // R for i, (j, k) in enumerate(o))
    assert sum(s.iteration_seeds(i) for i in range(s.iterations)) == sum(map(sum, phase_seeds))
    assert (s.batches == s.per_round * s.rounds).all()
    assert all(s.sizes[j].max(initial=0) <= 8 for j in range(b))


def test_schedule_gives_a_compute_worker_without_seeds_empty_batches():
    s = epoch_schedule([[5], [0]], Roles(4, 2), batch_size=2, replicas=1)
    assert s.iterations == 3 and s.batches.tolist() == [3, 3]
    assert s.sizes[1].tolist() == [0, 0, 0]


def test_unequal_feeders_share_rounds():
    # compute 0 fed by workers 0 and 2, compute 1 by worker 1 alone: rounds of 2 iterations
    s = epoch_schedule([[10], [10], [10]], Roles(5, 3), batch_size=4, replicas=1)
    assert s.per_round.tolist() == [1, 2, 1]
    assert s.order[0][:4] == [(0, 0), (2, 0), (0, 1), (2, 1)]
    assert s.order[1][:4] == [(1, 0), (1, 1), (1, 2), (1, 3)]


@pytest.mark.parametrize("world, b, G, steps", [(2, 1, 1, 5), (4, 2, 2, 5), (5, 3, 1, 4)])
def test_link_schedule_sends_every_step_and_spreads_the_phases(world, b, G, steps):
    """The link task: every batch worker's ``steps`` steps in order, ``G`` per global batch,
    the rest padding; the compute workers' iterations equal; every phase loaded in order."""
    roles = Roles(world, b)
    phases_of = [3, 1, 7][:b]
    s = link_schedule(steps, phases_of, roles, replicas=G)
    assert len({len(o) for o in s.order}) == 1
    pairs = sorted(p for o in s.order for p in o)
    assert pairs == sorted((j, k) for j in range(b) for k in range(s.batches[j]))
    assert (s.batches == s.per_round * s.rounds).all()
    for j in range(b):
        assert s.sizes[j].tolist() == [1] * steps + [0] * (int(s.batches[j]) * G - steps)
        assert s.phase_batches[j].sum() == s.batches[j] and len(s.phase_batches[j]) == phases_of[j]
    # the rounds of the node task's schedule for as many global batches
    ref = epoch_schedule([[steps * 8]] * b, roles, batch_size=8, replicas=G)
    assert s.order == ref.order and (s.per_round == ref.per_round).all()
