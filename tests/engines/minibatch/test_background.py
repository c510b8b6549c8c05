"""minibatch: batches prepared by a background thread (``--prefetch-batches``) are exactly the
inline ones, train the same model, and the thread ends cleanly however the epoch ends."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.engines.minibatch.config import MinibatchConfig
from tests.distributed.helpers import run_world
from tests.engines.conftest import community_graph


def _config(prefetch: int, epochs: int = 3, batch_size: int = 3):
    from shoal.training import TrainConfig

    return TrainConfig.from_options(
        model="sage",
        fanouts=(3, 2),
        batch_size=batch_size,
        hidden=8,
        epochs=epochs,
        lr=0.05,
        dropout=0.5,  # keyed by step and rank: the same masks either way
        seed=4,
        progress=False,
        normalize_features=False,  # the pulled rows are the pull's reused buffer
        engine=MinibatchConfig(prefetch_batches=prefetch),
    )


def _engine(rank: int, world: int, store: str, prefetch: int, **kw):
    from shoal.distributed import DistContext
    from shoal.engines.minibatch.engine import MinibatchEngine
    from shoal.store import Store

    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    return MinibatchEngine(Store.open(store), _config(prefetch, **kw), ctx)


def _flat(batch) -> tuple:
    mb = batch.mb
    blocks = [(b.edge_index.numpy().copy(), b.deg_src.numpy().copy()) for b in mb.blocks]
    return mb.n_id.copy(), blocks, batch.x.numpy().copy(), batch.y.numpy().copy()


def _batches_and_fit(rank: int, world: int, store: str):
    from collections import defaultdict

    from shoal.engines.minibatch.pipeline import BatchPipeline

    inline = _engine(rank, world, store, 0)
    background = _engine(rank, world, store, 2)
    assert inline.sample_group is None
    assert (background.sample_group is not None) == (world > 1)
    timer: dict = defaultdict(float)
    want = [_flat(b) for b in inline._batches(1, timer)]
    pipe = BatchPipeline(
        background._batches(1, timer), depth=2, group=background.sample_group, world_size=world
    )
    got = list(pipe)  # kept as they come: a reused buffer would show
    assert pipe.close(5.0) and not pipe.alive
    got = [_flat(b) for b in got]
    fits = {p: _engine(rank, world, store, p, epochs=2).fit().to_json() for p in (0, 2)}
    return want, got, fits


@pytest.mark.parametrize("world", [1, 2])
def test_background_batches_and_training_equal_inline(make_graph, make_store, world):
    g = community_graph(make_graph, n=96)
    store = str(make_store(parts=2, graph=g))
    for want, got, fits in run_world(_batches_and_fit, world, store):
        assert len(want) == len(got) > 2
        for (n_w, bl_w, x_w, y_w), (n_g, bl_g, x_g, y_g) in zip(want, got, strict=True):
            np.testing.assert_array_equal(n_w, n_g)
            for (e_w, d_w), (e_g, d_g) in zip(bl_w, bl_g, strict=True):
                np.testing.assert_array_equal(e_w, e_g)
                np.testing.assert_array_equal(d_w, d_g)
            np.testing.assert_array_equal(x_w, x_g)  # copies of the same rows, no arithmetic
            np.testing.assert_array_equal(y_w, y_g)
        a, b = fits[0], fits[2]
        assert [h["loss"] for h in b["history"]] == pytest.approx(
            [h["loss"] for h in a["history"]], rel=1e-5
        )
        assert b["test_accuracy"] == pytest.approx(a["test_accuracy"], abs=1e-9)
        assert b["config"]["prefetch_batches"] == 2 and a["config"]["prefetch_batches"] == 0
        assert all("batch_wait" in h["time_split"] for h in b["history"])
        assert all("batch_wait" not in h["time_split"] for h in a["history"])


class _Boom(RuntimeError):
    pass


def _shutdowns(rank: int, world: int, store: str):
    """Every way an epoch's pipeline can end, one after the other on the same group: each must
    leave the thread ended and the ranks' sampling collectives in step."""
    import threading
    from collections import defaultdict

    from shoal.engines.minibatch.pipeline import BatchPipeline, PeerStopped

    eng = _engine(rank, world, store, 2, batch_size=1)
    timer: dict = defaultdict(float)
    out: dict = {"batches": eng.num_batches}

    def pipe(epoch: int, source=None) -> BatchPipeline:
        src = eng._batches(epoch, timer) if source is None else source
        return BatchPipeline(src, depth=2, group=eng.sample_group, world_size=world)

    # 1. an epoch ended early on every rank (one batch taken, then closed)
    p = pipe(0)
    next(iter(p))
    out["early"] = (p.close(10.0), p.alive, p.produced)
    # 2. an exception in every rank's training step at its second batch
    p = pipe(1)
    try:
        for i, _ in enumerate(p):
            if i == 1:
                raise _Boom
    except _Boom:
        out["raised"] = (p.close(10.0), p.alive, p.produced)

    # 3. the batches themselves fail (in the thread) at the third: raised in the consumer
    def failing():
        for i, b in enumerate(eng._batches(2, timer)):
            if i == 2:
                raise _Boom("in the sampling thread")
            yield b

    p = pipe(2, failing())
    with pytest.raises(_Boom, match="sampling thread"):
        list(p)
    out["failed"] = (p.close(10.0), p.alive)
    # 4. one rank stops after a batch, the other goes on: it learns so after its queue
    p = pipe(3)
    taken = 0
    try:
        for _ in p:
            taken += 1
            if rank == 0 and world > 1:
                break
    except PeerStopped:
        out["peer_stopped"] = True
    out["one_sided"] = (p.close(10.0), p.alive, taken)
    # 5. the group is still in step: a whole epoch runs through
    p = pipe(4)
    out["whole"] = sum(1 for _ in p)
    p.close(10.0)
    out["threads"] = [t.name for t in threading.enumerate() if t.name == "shoal-sampler"]
    return out


def test_pipeline_ends_cleanly_however_the_epoch_ends(make_graph, make_store):
    g = community_graph(make_graph, n=96)
    store = str(make_store(parts=2, graph=g))
    res = run_world(_shutdowns, 2, store, timeout=120)
    n = res[0]["batches"]
    assert n >= 8  # longer than the queue, so the stops come mid-epoch
    for r in res:
        assert r["early"][:2] == (True, False) and r["early"][2] < n
        assert r["raised"][:2] == (True, False) and r["raised"][2] < n
        assert r["failed"] == (True, False)
        assert r["one_sided"][:2] == (True, False)
        assert r["whole"] == n
        assert r["threads"] == []
    # every rank's thread stopped at the same batch
    assert res[0]["early"][2] == res[1]["early"][2]
    assert res[0]["raised"][2] == res[1]["raised"][2]
    assert res[0]["one_sided"][2] == 1 and res[1].get("peer_stopped")
    assert res[1]["one_sided"][2] < n


def test_flags_and_config():
    import argparse

    from shoal.engines.config import read_config
    from shoal.engines.minibatch.config import DEFAULT_PREFETCH_BATCHES
    from shoal.engines.minibatch.options import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p.add_argument_group("minibatch"))
    assert p.parse_args([]).prefetch_batches is None  # the config's default fills it
    assert p.parse_args(["--no-background-sampling"]).prefetch_batches == 0
    assert p.parse_args(["--prefetch-batches", "3"]).prefetch_batches == 3
    assert read_config({"engine": "minibatch"}).engine.prefetch_batches == DEFAULT_PREFETCH_BATCHES
    assert read_config({"engine": "minibatch", "prefetch_batches": 0}).engine.prefetch_batches == 0
    with pytest.raises(ValueError, match="prefetch_batches"):
        MinibatchConfig(prefetch_batches=-1)
