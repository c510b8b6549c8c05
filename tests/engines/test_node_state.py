"""A rank's resident per-node state follows its own part and halo, not the global node count.

Two stores share part 0 exactly (its nodes, edges, halo, features and splits); the second
adds 200,000 nodes to part 1. Rank 0 builds an engine on part 0 and trains an epoch, under
``tracemalloc`` (numpy's arrays are traced): the bytes it holds afterwards must not grow
with the added nodes: ``averaging`` and ``hec`` train on their parts (local node tables);
``minibatch`` samples across ranks, and holds local node tables too (the sampler asks owners
for the degrees of other nodes, with a hashed id map; its windows keep id sets sized to a
window). A control run of the averaging engine with global tables (9 bytes per node) shows
the measurement sees such growth (measured: the local runs' bytes differ by under 2 KB, the
control's by 1.8 MB).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.distributed.helpers import run_world

BASE = 80  # a ring in two arcs of 40: part 0's halo is two nodes of part 1
EXTRA = 200_000  # nodes added to part 1 (a path), labelled, in no split


def _graph(make_graph, extra: int):
    n = BASE + extra
    rng = np.random.default_rng(0)
    ring = [(u, (u + 1) % BASE) for u in range(BASE)] + [(3, 17), (45, 70)]
    path = np.stack([np.arange(BASE, n - 1), np.arange(BASE + 1, n)], axis=1)
    edges = np.concatenate([np.asarray(ring, np.int64).reshape(-1, 2), path])
    y = np.arange(n) % 2
    x = np.zeros((n, 4), np.float32)
    x[np.arange(n), y] = 1.0
    x[:BASE] += rng.normal(0, 0.5, (BASE, 4)).astype(np.float32)
    idx = rng.permutation(BASE)
    return make_graph(
        edges,
        n,
        directed=False,
        x=x,
        y=y,
        train=np.sort(idx[:24]),
        val=np.sort(idx[24:40]),
        test=np.sort(idx[40:]),
    )


def _state(rank: int, world: int, store: str, engine: str, scope: str | None) -> tuple:
    import tracemalloc

    from shoal.distributed import DistContext
    from shoal.engines.registry import get_engine
    from shoal.store import Store
    from shoal.training import TrainConfig

    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    tc = TrainConfig.from_options(
        fanouts=(3, 3), hidden=8, epochs=1, batch_size=8, seed=0, progress=False
    )
    cls = get_engine(engine)
    if scope is not None:
        cls = type("Scoped", (cls,), {"tables_scope": scope})
    tracemalloc.start()
    eng = cls(Store.open(store), tc, ctx)
    eng.train_epoch(0)
    held = tracemalloc.get_traced_memory()[0]
    # no tracemalloc.stop(): on CPython < 3.12.9 stopping races with threads that allocate
    # (the heartbeat, numpy in background threads) and can crash the rank (gh-128679); the
    # tracing ends with the process
    return held, eng.tables.nbytes, eng.tables.scope


@pytest.mark.parametrize(
    ("engine", "scope"),
    [("averaging", None), ("hec", None), ("minibatch", None), ("averaging", "global")],
)
def test_rank_state_does_not_grow_with_the_global_node_count(make_graph, make_store, engine, scope):
    parts = lambda n: (np.arange(n) >= BASE // 2).astype(np.int32)  # noqa: E731
    small = str(make_store(parts(BASE), graph=_graph(make_graph, 0)))
    big = str(make_store(parts(BASE + EXTRA), graph=_graph(make_graph, EXTRA)))
    (held0, tab0, sc), _ = run_world(_state, 2, small, engine, scope, timeout=120)
    (held1, tab1, _), _ = run_world(_state, 2, big, engine, scope, timeout=120)
    grew = held1 - held0
    if sc == "global":  # the control: dense tables over every node, 9 bytes each
        assert tab1 - tab0 == 9 * EXTRA
        assert grew >= 8 * EXTRA  # the tables' 9 B per node, within allocator noise
    else:
        assert sc == "local" and tab1 == tab0
        assert grew < EXTRA, f"rank 0 holds {grew} more bytes for {EXTRA} more nodes"
