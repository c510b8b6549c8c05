"""The averaging engine's link task (issue 53): each part trains on its own edges in its local
id space (:mod:`shoal.engines.averaging.links`), weighted by its positives in the average."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.data.linksplit import EdgeSplitConfig, split_edges
from shoal.distributed import DistConfig, DistContext, process_group
from shoal.engines.averaging.config import AveragingConfig
from shoal.engines.averaging.engine import AveragingEngine
from shoal.engines.averaging.links import PartLinks
from shoal.errors import ShoalInputError
from shoal.store import Store
from shoal.training import TrainConfig
from tests.distributed.helpers import run_world
from tests.engines.conftest import community_graph


@pytest.fixture
def link_store(make_graph, make_store, tmp_path):
    """The community graph split for link prediction, in 3 parts not aligned with the
    communities (so a part's negatives span both)."""
    g = community_graph(make_graph, n=60)
    s = split_edges(g, tmp_path / "split", EdgeSplitConfig(val=0.15, test=0.15, seed=1))
    return str(make_store(np.random.default_rng(0).integers(0, 3, 60), graph=s))


def _cfg(**kw) -> TrainConfig:
    base = dict(model="sage", fanouts=(-1, -1), batch_size=8, hidden=8, epochs=2, lr=0.02)
    base.update(dropout=0.0, seed=5, progress=False, threads=1, task="link")
    return TrainConfig.from_options(**{**base, **kw})


def test_a_parts_steps_are_its_own_edges_sampled_in_local_ids(link_store):
    with process_group(DistConfig()) as ctx:
        eng = AveragingEngine(Store.open(link_store), _cfg(), ctx)
        assert eng.link_scope == "part" and len(eng.loaders) == 3
        assert all(isinstance(ld, PartLinks) for ld in eng.loaders)
        # each model weighs its part's positives; together every positive of the task
        assert eng.part_weights == [float(ld.count) for ld in eng.loaders]
        assert sum(eng.part_weights) == eng.link.total_positives > 0
        for ld in eng.loaders:
            part, lo = ld.part, int(ld.part.start)
            batches = list(ld.epoch(1))
            assert len(batches) == len(ld) == -(-ld.count // 8)
            pairs = np.concatenate([b.step.pos for b in batches])
            assert len(pairs) == ld.count == len({tuple(sorted(e)) for e in pairs.tolist()})
            for b in batches:
                st, mb = b.step, b.mb
                assert 0 < len(st) <= 8
                ends = np.concatenate([st.pos.ravel(), st.neg.ravel()])
                assert ((ends >= lo) & (ends < lo + part.num_core)).all()  # core nodes
                assert np.array_equal(np.asarray(mb.n_id[: mb.num_seeds]), st.nodes - lo)
                # no block passes a message along the step's positives or their reverses
                n_id = np.asarray(mb.n_id)
                banned = {tuple(e) for e in (st.exclude - lo).tolist()}
                for blk in mb.blocks:
                    src, dst = (n_id[np.asarray(i)] for i in blk.edge_index)
                    assert not banned & set(zip(src.tolist(), dst.tolist(), strict=True))
                assert b.x.shape == (len(n_id), 4)
            # the same steps when drawn again (a resumed run), others the next epoch
            again = [b.step for b in ld.epoch(1)]
            assert all(
                np.array_equal(a.neg, b.step.neg) for a, b in zip(again, batches, strict=True)
            )
        rec = eng.train_epoch(0)
        assert rec["averaged"] and rec["train_accuracy"] is None and np.isfinite(rec["loss"])


def _fit_params(rank: int, world: int, store: str, part_models: bool) -> list[float]:
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    cfg = _cfg(engine=AveragingConfig(part_models=part_models))
    eng = AveragingEngine(Store.open(store), cfg, ctx)
    for e in range(2):
        eng.train_epoch(e)
    return torch.cat([p.detach().reshape(-1) for p in eng.model.parameters()]).tolist()


def test_part_models_on_one_rank_equal_the_parts_spread_over_ranks(link_store):
    """A part's link steps depend on the part only (its shuffle, batch seeds and negatives):
    one process training the three parts' models equals two processes sharing them."""
    one = run_world(_fit_params, 1, link_store, True, timeout=120)[0]
    two = run_world(_fit_params, 2, link_store, True, timeout=120)
    assert two[0] == two[1]
    assert np.allclose(one, two[0], atol=1e-5)


def test_learned_input_rows_are_refused(link_store):
    with process_group(DistConfig()) as ctx, pytest.raises(ShoalInputError, match="minibatch"):
        AveragingEngine(Store.open(link_store), _cfg(link={"embedding_dim": 8}), ctx)
