"""Pulled served layers (shoal.distributed.pulled) against the stored-halo path, whose
outputs tests/distributed/test_blocked.py checks against single-process evaluation: the same
last-layer rows for every target on real processes, in one round and step or in many
(ranks holding several parts, a rank holding none, float32 and 16-bit rows), and the
kernel that finds each list's run per owner."""

from __future__ import annotations

import numpy as np
import pytest

from tests.distributed.helpers import run_world
from tests.distributed.test_served import _graph, _outputs

#: working memory in which every round of the test graph fits a pull
ROOMY = 1 << 28


def _counted(
    rank: int,
    world: int,
    store: str,
    part_to_rank,
    budget: int,
    normalize: bool,
    pull,
    sums: bool = True,
    chunk: int = 0,
    min_steps: int = 0,
    packed_share: int = -1,
    spill: bool = True,
    share_max: int = 0,
):
    """``_outputs`` with the layers pulled (or swept, ``pull`` false; the owners summing,
    or the rows sent, ``sums`` false), the rounds pulled on this rank and the most steps a
    pulled round took. ``chunk``: partial sums sent this many targets at a time;
    ``min_steps``: a sweep's fewest steps (0: as set); ``packed_share``: steps needing
    fewer than ``1 / packed_share`` of their rows read them packed (-1: as set). With the
    owners summing, the steps read packed and all steps are counted too. ``spill``: own
    rows may be spilled (``SPILL_OWN_ROWS``); whether each round spilled them is kept in
    ``_counted.spilled``. ``share_max``: the smallest share of the working memory the
    owners' step buffers may shrink to (0: as set)."""
    import shoal.distributed.pulled as P
    import shoal.distributed.pulled_steps as PT
    import shoal.distributed.pulled_sums as PS

    P.PARTIAL_SUMS = sums
    P.SPILL_OWN_ROWS = spill
    PS.SUM_CHUNK = P.SUM_CHUNK = chunk or PS.SUM_CHUNK  # (the plan counts pulled.SUM_CHUNK)
    P.MIN_STEPS = min_steps or P.MIN_STEPS
    P.SUM_STEP_SHARE_MAX = share_max or P.SUM_STEP_SHARE_MAX
    PT.PACKED_SHARE = PT.PACKED_SHARE if packed_share < 0 else packed_share
    rounds, steps, packed, spilled = [], [], [], []
    _counted.spilled = spilled
    kept_packed = PS.packed

    def count_packed(*args):
        packed.append(kept_packed(*args))
        return packed[-1]

    PS.packed = count_packed
    kept = {name: getattr(P, name) for name in ("rows_round", "sums_round")}

    def counted(one):
        def count(*args, **kw):
            rounds.append(1)
            spilled.append(kw.get("spill") is not None)
            steps.append(kw["steps"])
            return one(*args, **kw)

        return count

    for name, one in kept.items():
        setattr(P, name, counted(one))
    try:
        got, _ = _outputs(rank, world, store, part_to_rank, budget, 8, normalize, pull=pull)
    finally:
        for name, one in kept.items():
            setattr(P, name, one)
        PS.packed = kept_packed
    counts = (len(rounds), max(steps, default=0))
    return got, counts + ((sum(packed), len(packed)) if packed_share >= 0 else ())


def _compare(res, n: int) -> None:
    """Every node's last-layer row once, pulled as by the stored-halo path."""
    served, stored = {}, {}
    for got, _ in res:
        served.update(got["served"])
        stored.update(got["stored"])
    assert sorted(served) == sorted(stored) == list(range(n))  # every node, once
    a = np.stack([served[v] for v in sorted(served)])
    b = np.stack([stored[v] for v in sorted(stored)])
    assert np.abs(b).max() > 0.1  # the outputs are not all zero
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("world", "part_to_rank", "budget"),
    [
        (2, [0, 1, 0], ROOMY),  # rank 0 holds two parts: a halo source may be its own row
        (2, [0, 0], ROOMY),  # rank 1 holds nothing: it serves nothing, asks nothing, steps
        (3, [2, 0, 1, 0], ROOMY),  # several peers per step
        (2, [0, 1, 0], 6000),  # many rounds of many steps: cursors move on step by step
        (3, [2, 0, 1, 0], 6000),
    ],
)
def test_pulled_layers_equal_stored(make_graph, make_store, world, part_to_rank, budget):
    g = _graph(make_graph)
    node_part = np.random.default_rng(1).integers(0, len(part_to_rank), g.num_nodes)
    store = str(make_store(node_part, graph=g))
    # partial sums sent back 7 targets at a time: a block in many chunks; a sweep in one
    # step when its rows fit one
    args = (store, part_to_rank, budget, True, True, True, 7, 1)
    res = run_world(_counted, world, *args, timeout=240)
    _compare(res, g.num_nodes)
    pulled = [r for _, r in res]
    assert len({rounds for rounds, _ in pulled}) == 1, pulled  # every rank in every round
    holds = np.bincount(part_to_rank, minlength=world) > 0
    rounds = pulled[0][0]
    steps = max(s for _, s in pulled)
    if budget == ROOMY:  # a round per part of the rank with most, in a step, each layer
        assert rounds == 2 * max(np.bincount(part_to_rank))
        # each rank steps over its own rows alone (owners sum): none without rows
        assert [s for _, s in pulled] == [int(h) for h in holds]
    else:
        assert rounds > 6 and steps > 3


def test_rows_pulled_in_lockstep(make_graph, make_store):
    """``PARTIAL_SUMS = False`` (the ablation: rows sent to the targets' ranks every step):
    the same outputs, every rank stepping together, a rank without rows too."""
    g = _graph(make_graph)
    for part_to_rank, budget in (([0, 1, 0], 6000), ([0, 0], ROOMY)):
        node_part = np.random.default_rng(1).integers(0, len(part_to_rank), g.num_nodes)
        store = str(make_store(node_part, graph=g))
        res = run_world(_counted, 2, store, part_to_rank, budget, True, True, False, timeout=240)
        _compare(res, g.num_nodes)
        pulled = [r for _, r in res]
        assert len(set(pulled)) == 1, pulled
        assert pulled[0][1] > (3 if budget < ROOMY else 0)


@pytest.mark.parametrize("sums", [True, False])
def test_a_sweep_takes_min_steps(make_graph, make_store, sums):
    """Rows that would fit one step are swept in ``MIN_STEPS`` (6): the first step's read
    waits alone, the later ones are read while the step before is pulled."""
    g = _graph(make_graph)
    node_part = np.random.default_rng(1).integers(0, 2, g.num_nodes)
    store = str(make_store(node_part, graph=g))
    res = run_world(_counted, 2, store, [0, 1], ROOMY, True, True, sums, timeout=240)
    _compare(res, g.num_nodes)
    assert [steps for _, (_, steps) in res] == [6, 6]  # ~150 rows a rank: 6 steps of 25


def _store_as(g, tmp_path, parts: int, dtype: str):
    """A store of ``g`` in ``parts`` random parts, its features stored as ``dtype``."""
    from shoal.partition.base import Assignment
    from shoal.partition.io import write_assignment
    from shoal.store import build_store

    node_part = np.random.default_rng(1).integers(0, parts, g.num_nodes).astype(np.int32)
    adir = tmp_path / "assign"
    write_assignment(adir, Assignment(node_part=node_part, num_parts=parts, algorithm="hand"), g)
    store = tmp_path / "store"
    build_store(g, adir, store, feature_dtype=dtype)
    return store


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_pulled_rows_as_stored(make_graph, tmp_path, dtype):
    """16-bit rows, not normalised: the first layer reads, sends and sums them as stored."""
    g = _graph(make_graph)
    store = _store_as(g, tmp_path, 3, dtype)
    for budget in (ROOMY, 6000):
        res = run_world(_counted, 2, str(store), [0, 1, 0], budget, False, True, timeout=240)
        _compare(res, g.num_nodes)
        assert all(rounds >= 4 for _, (rounds, _) in res)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_steps_read_packed(make_graph, tmp_path, dtype):
    """Steps that need few of their rows read them packed, found through a slot per offset
    (``PACKED_SHARE``; 0: every step whose slots fit the buffer's tail): packed steps give
    the outputs of rows laid out by offset (a huge share: only the steps that need no row
    packed)."""
    g = _graph(make_graph)
    store = _store_as(g, tmp_path, 2, dtype)
    for share, budget in ((0, ROOMY), (0, 6000), (1 << 30, 6000)):
        args = (str(store), [0, 1], budget, False, True, True, 0, 0, share)
        res = run_world(_counted, 2, *args, timeout=240)
        _compare(res, g.num_nodes)
        for _, (_, _, packed, steps) in res:
            assert steps > 0
            # every step needs all its rows when a round takes every target (ROOMY): the
            # slots do not fit beside them; small blocks' rounds need few
            assert packed < steps if share else (packed > 0) == (budget != ROOMY)


def _spilling(rank: int, world: int, store: str, part_to_rank, budget: int, spill: bool):
    """:func:`_counted` (not normalised, pulled, the owners summing, partial sums sent 7 targets at a time) with the rounds that
    spilled their own rows: ``(outputs, (rounds, steps), spilled rounds)``."""
    args = (rank, world, store, part_to_rank, budget, False, True, True, 7)
    got, counts = _counted(*args, spill=spill)
    return got, counts, sum(_counted.spilled)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_own_rows_spilled(make_graph, tmp_path, dtype):
    """In little working memory the owners' sum writes its targets' own rows to a scratch
    file and reads them back to finish when that takes fewer rounds (``SPILL_OWN_ROWS``):
    the outputs of the rows kept in memory (the ablation), in fewer rounds. Rows as wide
    as the hidden layer's (8): the first layer is pulled, not projected first, and its own
    rows take a third of a target's memory."""
    g = _graph(make_graph, dim=8)
    store = str(_store_as(g, tmp_path, 2, dtype))
    rounds = {}
    for spill in (True, False):
        res = run_world(_spilling, 2, store, [0, 1], 4000, spill, timeout=240)
        _compare([(got, counts) for got, counts, _ in res], g.num_nodes)
        rounds[spill] = [counts[0] for _, counts, _ in res]
        spilled = [n for _, _, n in res]
        assert all(n > 0 for n in spilled) if spill else spilled == [0, 0]
    assert max(rounds[True]) < max(rounds[False]), rounds


def test_the_ablation_sweeps_every_layer(make_graph, make_store):
    """``PULL_ROUNDS = False``: no layer is pulled, the outputs are the same."""
    g = _graph(make_graph)
    node_part = np.random.default_rng(1).integers(0, 2, g.num_nodes)
    store = str(make_store(node_part, graph=g))
    res = run_world(_counted, 2, store, [0, 1], ROOMY, True, False, timeout=240)
    _compare(res, g.num_nodes)
    assert [r for _, r in res] == [(0, 0), (0, 0)]


def test_owner_runs_of_served_lists():
    """Each list's entries per owner rank: found when every owner's entries form one
    non-decreasing run, refused otherwise (the lists are then sorted)."""
    from shoal.distributed import _served_kernels as SK

    rank_offset = np.array([0, 10, 20])  # rank 0 serves 0-9, rank 1 10-19
    ptr = np.array([0, 4, 4, 7])
    ids = np.array([12, 15, 3, 3, 5, 9, 9])  # rank 1's run, then rank 0's; nothing; rank 0's
    cur, end = np.empty((2, 3), np.int64), np.empty((2, 3), np.int64)
    assert SK._owner_runs(ptr, ids, rank_offset, cur, end)
    assert cur.tolist() == [[2, 4, 4], [0, 4, 4]] and end.tolist() == [[4, 4, 7], [2, 4, 4]]
    assert not SK._owner_runs(ptr, np.array([12, 3, 15, 3, 5, 9, 9]), rank_offset, cur, end)
    assert not SK._owner_runs(ptr, np.array([15, 12, 3, 3, 5, 9, 9]), rank_offset, cur, end)


def test_owner_lists_of_runs():
    """The runs of every owner, owner by owner in the order given, as offsets among the
    owner's rows; a target with nothing from an owner adds nothing."""
    from shoal.distributed import _served_kernels as SK

    rank_offset = np.array([0, 10, 20])
    ids = np.array([12, 15, 3, 3, 5, 9, 9])
    cur = np.array([[2, 4, 4], [0, 4, 4]])
    end = np.array([[4, 4, 7], [2, 4, 4]])
    out = np.full(7, -1, np.int32)
    SK._owner_lists(ids, cur, end, np.array([1, 0]), rank_offset, out)
    assert out.tolist() == [2, 5, 3, 3, 5, 9, 9]  # rank 1's (12, 15 - 10), then rank 0's


def test_smaller_steps_for_a_round_fewer(make_graph, tmp_path):
    """When step buffers smaller than 1 / ``SUM_STEP_SHARE`` of the working memory leave
    the blocks room for a round fewer (each round a sweep of the rank's rows), the owners'
    sum takes them (``SUM_STEP_SHARE_MAX``): the outputs of the fixed share (the ablation),
    in fewer rounds of more steps."""
    import shoal.distributed.pulled as P

    g = _graph(make_graph, dim=8)
    store = str(_store_as(g, tmp_path, 2, "float32"))
    counts = {}
    for share_max in (P.SUM_STEP_SHARE_MAX, P.SUM_STEP_SHARE):
        args = (store, [0, 1], 5000, False, True, True, 7, 0, -1, True, share_max)
        res = run_world(_counted, 2, *args, timeout=240)
        _compare(res, g.num_nodes)
        counts[share_max] = [c for _, c in res]
    for (rounds, steps), (fixed_rounds, fixed_steps) in zip(
        counts[P.SUM_STEP_SHARE_MAX], counts[P.SUM_STEP_SHARE], strict=True
    ):  # (13 rounds of 12 steps at the fixed share: 11 of 19-20)
        assert rounds < fixed_rounds and steps > fixed_steps, counts
