"""A store of compact feature rows (bfloat16, int8 with its scales) trains the ``minibatch``
engine on 2 processes: under a budget that caches part of the rows (cache and windows hold
them as stored) exactly as with every row in memory, and reading them at their stored size."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.partition.base import Assignment
from shoal.partition.io import write_assignment
from shoal.store import build_store
from tests.distributed.helpers import run_world
from tests.engines.conftest import community_graph


def _train(rank: int, world: int, store: str, small: bool, epochs: int) -> dict:
    """The minibatch engine on ``store``; ``small``: a budget whose pool holds half the rows
    at their stored size, as a cache and two windows."""
    import shoal.engines.base as base
    import shoal.rows.budget as budget
    from shoal.distributed import DistContext
    from shoal.engines import get_engine
    from shoal.store import Store
    from shoal.training import TrainConfig

    cfg = dict(
        model="sage",
        fanouts=(3, 3),
        hidden=8,
        batch_size=4,
        seed=5,
        epochs=epochs,
        lr=0.02,
        progress=False,
        normalize_features=True,
    )
    st = Store.open(store)
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    make = get_engine("minibatch")
    base.Engine.reserve_bytes = lambda self, num_rows: 13 * st.num_nodes
    eng = make(st, TrainConfig.from_options(**cfg, memory="8GiB"), ctx)
    if small:  # the same plan, its pool a third cache and two windows; the CSR held (the
        # minibatch sampler draws from it in memory), no block cache
        p = eng.budget
        eng.close_io()
        budget.MIN_WINDOW = 1024
        rows = sum(q.num_core for q in eng.parts)
        mw = budget.batch_window(cfg["fanouts"], cfg["batch_size"], rows, eng.row_bytes)
        pool = max(3 * mw + 3, p.features // 2)
        memory = p.reserve + p.structure + pool + 64
        eng = make(st, TrainConfig.from_options(**cfg, memory=memory), ctx)
    records = [eng.train_epoch(e) for e in range(epochs)]
    acc = eng.evaluate(("val", "test"))
    eng.close_io()
    return {
        "loss": [r["loss"] for r in records],
        "io": [r["io"] for r in records],
        "params": [p.detach().numpy().copy() for p in eng.model.parameters()],
        "acc": acc,
    }


# int8: the dtype with scales (bfloat16's and float16's decoding is the same gather path,
# each bit pattern tested in tests/rows/test_decode.py; two runs on 2 processes each cost 15 s)
@pytest.mark.parametrize("name", ["int8"])
def test_minibatch_trains_compact_rows_out_of_core_as_in_memory(make_graph, tmp_path, name):
    g = community_graph(make_graph, n=400)
    noise = np.random.default_rng(2).normal(0, 1, (400, 28)).astype(np.float32)
    g = make_graph(
        np.concatenate(list(g.edge_stream())),
        400,
        x=np.hstack([np.asarray(g.features()), noise]),  # 32 columns: rows outweigh the slack
        y=np.asarray(g.labels()),
        train=np.asarray(g.split("train")),
        val=np.asarray(g.split("val")),
        test=np.asarray(g.split("test")),
    )
    a = Assignment(node_part=np.arange(400, dtype=np.int32) % 2, num_parts=2, algorithm="hand")
    write_assignment(tmp_path / "a", a, g)
    store = tmp_path / "s"
    build_store(g, tmp_path / "a", store, halo_features=True, feature_dtype=name)
    big = run_world(_train, 2, str(store), False, 2)
    small = run_world(_train, 2, str(store), True, 2)
    item = 2 if name == "bfloat16" else 1
    for b, s in zip(big, small, strict=True):
        assert b["loss"] == s["loss"] and b["acc"] == s["acc"]
        for p, q in zip(b["params"], s["params"], strict=True):
            np.testing.assert_array_equal(p, q)
        assert all(r["bytes_read"] == 0 for r in b["io"])
        io = s["io"][0]
        assert io["bytes_read"] > 0 and io["rows_read"] > 0
        # rows counted at their stored size (32 columns), not as float32
        assert io["unique_bytes"] == io["unique_rows"] * 32 * item > 0
        assert 0 < io["cache_hit_rate"] < 1
    assert 0.0 < big[0]["acc"]["test"] <= 1.0
