"""fullgraph engine, the link task: one full-batch step's loss and gradients are those of
single-process full-graph link prediction over every rank's positives and negatives."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.distributed as dist

from shoal.data.linksplit import EdgeSplitConfig, split_edges
from shoal.distributed import DistContext
from shoal.engines.config import read_config
from shoal.engines.fullgraph.engine import FullGraphEngine
from shoal.store import Store
from tests.distributed.helpers import run_world
from tests.engines.conftest import community_graph
from tests.engines.fullgraph.test_engine import CFG, _whole_graph


def _link_step(rank: int, world: int, store: str, extra: dict):
    """One link step on every rank, then on every rank the reference: the whole graph's
    forward with the initial weights, the seam's loss of every rank's step weighted by its
    share of the positives, summed."""
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    tc = read_config({**CFG, "engine": "fullgraph", "task": "link", **extra})
    eng = FullGraphEngine(Store.open(store), tc, ctx)
    ref = copy.deepcopy(eng.model)
    eng.model.train()
    step = eng.link_step(0)
    loss = eng.link_loss(eng.forward(), step)
    eng.backward(loss)
    eng.all_reduce_gradients(average=False)
    total = torch.tensor([float(loss)], dtype=torch.float64)
    steps = [None] * world
    if world > 1:
        dist.all_reduce(total)
        dist.all_gather_object(steps, step)
    else:
        steps = [step]
    blk, x, *_ = _whole_graph(store, tc)
    h = ref(x, [blk] * tc.num_layers)
    n = eng.link.total_positives
    want = sum(eng.link.loss(ref, h[torch.from_numpy(s.nodes)], s) * len(s) / n for s in steps)
    want.backward()
    return (
        float(total),
        float(want),
        [len(s) for s in steps],
        [p.grad.clone() for p in eng.model.parameters()],
        [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in ref.parameters()],
    )


@pytest.fixture
def link_graph(make_graph, tmp_path):
    g = community_graph(make_graph)
    return split_edges(g, tmp_path / "split", EdgeSplitConfig(val=0.1, test=0.1, seed=1))


@pytest.mark.parametrize("mode", ["comm", "cache", "hybrid"])
def test_one_link_step_equals_single_process_full_graph(link_graph, make_store, mode):
    store = str(make_store(graph=link_graph, halo_features=False))
    extra = {"model": "sage", "deps": mode, "dep_costs": (1.0, 1.0, 6.0), "link": {"scorer": "mlp"}}
    res = run_world(_link_step, 2, store, extra, timeout=120)
    for loss, want, counts, grads, ref_grads in res:
        assert min(counts) > 0
        assert loss == pytest.approx(want, rel=1e-5)
        for a, b in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_a_rank_without_positives_takes_part_in_the_step(link_graph, make_store):
    """Rank 1 holds one node (no positive inside its part): its zero loss still runs the
    backward and the all-reduce, and the step is rank 0's."""
    node_part = np.zeros(link_graph.num_nodes, np.int32)
    node_part[7] = 1
    store = str(make_store(node_part, graph=link_graph, halo_features=False))
    res = run_world(_link_step, 2, store, {"model": "sage", "deps": "comm"}, timeout=120)
    for loss, want, counts, grads, ref_grads in res:
        assert counts[0] > 0 and counts[1] == 0
        assert loss == pytest.approx(want, rel=1e-5)
        for a, b in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
