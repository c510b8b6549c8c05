"""fullgraph's memory at start: the estimate of what a rank holds, and the refusal when its
budget cannot hold it (issue 33: at the very least refuse at start, naming the memory needed
and the parts that would fit)."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.engines.fullgraph.costs import check_fits, memory_bytes
from shoal.errors import ShoalInputError
from tests.distributed.helpers import run_world


def test_memory_bytes_by_hand():
    # 100 rows of 16-byte features; widths 4 -> 8 -> 3: outputs 8 + 3 floats per row, each
    # with its gradient and one saved intermediate; 50 edges as two int64 arrays per layer
    assert memory_bytes(rows=100, row_bytes=16, widths=[4, 8, 3], edges=50) == (
        100 * 16 + 3 * 4 * 100 * (8 + 3) + 16 * 50 * 2
    )
    assert memory_bytes(rows=0, row_bytes=16, widths=[4, 8, 3], edges=0) == 0


def test_check_fits_passes_within_the_pool_and_names_the_need_beyond_it():
    check_fits(100, 100, rank_parts=2, num_parts=4, world=2)  # exactly fits
    with pytest.raises(ShoalInputError) as e:
        check_fits(400 << 20, 100 << 20, rank_parts=4, num_parts=8, world=2)
    msg = str(e.value) + e.value.fix
    assert "400 MiB" in msg and "100 MiB" in msg  # needed, left
    assert "about 1 part(s)" in msg  # 100 MiB per part
    assert "at least 8 processes" in msg and "--memory" in msg and "minibatch" in msg
    # not even one part fits: more processes cannot help, smaller parts can
    with pytest.raises(ShoalInputError) as e:
        check_fits(1000 << 20, 300 << 20, rank_parts=1, num_parts=2, world=2)
    msg = str(e.value) + e.value.fix
    assert "about 0 part(s)" in msg and "processes" not in e.value.fix
    assert "at least 7 parts" in msg and "by about 701 MiB" in msg


def _build(rank: int, world: int, store: str, memory: str) -> str:
    import shoal.engines.base as base
    from shoal.distributed import DistContext
    from shoal.engines.config import read_config
    from shoal.engines.fullgraph.engine import FullGraphEngine
    from shoal.store import Store

    # the reserve fixed at 640 MiB (not this process's measured footprint): the budgets below
    # test fullgraph's own check, on any machine
    base.Engine.reserve_bytes = lambda self, num_rows: 640 << 20
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    tc = read_config(
        {
            "engine": "fullgraph",
            "fanouts": (-1, -1),
            "hidden": 4096,
            "memory": memory,
            "dep_costs": (1.0, 1.0, 6.0),
            "progress": False,
            "threads": 1,
        }
    )
    try:
        FullGraphEngine(Store.open(store), tc, ctx)
    except ShoalInputError as e:
        return str(e)
    return "built"


def test_a_rank_whose_parts_exceed_its_budget_is_refused_at_start(make_graph, make_store):
    n = 3000  # 4096-wide hidden layer: 3000 x 4096 x 12 B = 141 MiB of activations
    rng = np.random.default_rng(0)
    edges = np.stack([rng.integers(0, n, 5 * n), rng.integers(0, n, 5 * n)], 1)
    y = np.arange(n) % 2
    g = make_graph(
        edges,
        n,
        x=rng.normal(size=(n, 4)).astype(np.float32),
        y=y,
        train=np.arange(0, n, 3),
        val=np.arange(1, n, 3),
        test=np.arange(2, n, 3),
    )
    store = str(make_store(parts=1, graph=g))
    # the reserve (640 MiB) and two 16 MiB windows fit; the activations do not
    got = run_world(_build, 1, store, "700MiB", timeout=120)[0]
    assert "fullgraph keeps every row and layer" in got and "need about 141 MiB" in got, got
    assert run_world(_build, 1, store, "2GiB", timeout=120)[0] == "built"
    # below the minimum working set the memory plan refuses first
    assert "minimum working set" in run_world(_build, 1, store, "600MiB", timeout=120)[0]
