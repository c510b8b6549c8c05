"""hec with ``--task link`` (issue 53): local link steps over the rank's solid nodes, the
caches pushed and hit as for the node task."""

from __future__ import annotations

import numpy as np

from shoal.data.linksplit import EdgeSplitConfig, split_edges
from shoal.distributed import DistContext
from shoal.engines.config import read_config
from shoal.engines.hec.engine import HecEngine
from shoal.store import Store
from tests.distributed.helpers import run_world
from tests.engines.conftest import community_graph

CFG = dict(
    model="sage",
    fanouts=(-1, -1),  # every neighbour: a positive edge would be in the blocks if not excluded
    batch_size=8,
    hidden=8,
    epochs=2,
    lr=0.02,
    dropout=0.0,
    seed=5,
    progress=False,
    threads=1,
    task="link",
    hec_push=4,
)


def _steps_then_fit(rank: int, world: int, store: str) -> dict:
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    eng = HecEngine(Store.open(store), read_config({**CFG, "engine": "hec"}), ctx)
    g, checked, leaked, misplaced = eng.graph, 0, 0, 0
    for k, step in enumerate(eng.link.steps(0)):
        if not len(step):
            continue
        mb = eng._sample_local(0, k, step)
        # the seeds come first, in step.nodes' order, as solid ids
        misplaced += int((g.solid[mb.n_id[: len(step.nodes)]] != step.nodes).sum())
        banned = {tuple(e) for e in step.exclude.tolist()}
        for block in mb.blocks:
            src, dst = block.edge_index.numpy()
            edges = zip(
                eng.local_ids[mb.n_id[src]].tolist(),
                eng.local_ids[mb.n_id[dst]].tolist(),
                strict=True,
            )
            leaked += sum(e in banned for e in edges)
        checked += len(step)
    out = eng.fit().to_json()
    return {"checked": checked, "leaked": leaked, "misplaced": misplaced, "result": out}


def test_link_steps_exclude_their_positives_and_the_caches_serve_halo_rows(
    make_graph, make_store, tmp_path
):
    g = community_graph(make_graph)
    s = split_edges(g, tmp_path / "link", EdgeSplitConfig(val=0.15, test=0.15, seed=1))
    store = str(make_store(parts=4, graph=s, halo_features=False))  # two parts per rank
    res = run_world(_steps_then_fit, 2, store, timeout=300)
    assert all(r["checked"] > 0 and r["leaked"] == 0 and r["misplaced"] == 0 for r in res)
    out = [r["result"] for r in res]
    assert out[0]["test_mrr"] == out[1]["test_mrr"] and out[0]["metric"] == "mrr"
    for h in out[0]["history"]:
        assert h["train_accuracy"] is None and np.isfinite(h["loss"])
        for layer in h["hec"]:  # Algorithm 2 as for the node task: every push arrives
            assert layer["received"] == layer["pushed"] > 0
            assert layer["hits"] + layer["dropped"] == layer["lookups"]
    assert out[0]["history"][-1]["hec"][0]["hits"] > 0
