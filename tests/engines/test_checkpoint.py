"""Engines: per-epoch checkpoints with exact resume, early stopping, the metrics file."""

from __future__ import annotations

import json

import pytest

from shoal.distributed import DistContext
from shoal.engines import get_engine
from shoal.store import Store
from shoal.training import TrainConfig
from tests.distributed.helpers import WorldFailed, run_world


def _fit(rank: int, world: int, store: str, engine: str, crash_at: int | None, kw: dict):
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    options = dict(
        model="sage",
        fanouts=(3, 3),
        batch_size=4,
        hidden=8,
        epochs=6,
        lr=0.05,
        dropout=0.5,  # the dropout stream must be restored too
        seed=1,
        eval_every=2,
        progress=False,
    )
    tc = TrainConfig.from_options(**{**options, **kw})
    eng = get_engine(engine)(Store.open(store), tc, ctx)
    if crash_at is not None and rank == world - 1:
        train_epoch = eng.train_epoch

        def crashing(epoch: int):
            if epoch == crash_at:
                raise RuntimeError(f"simulated crash in epoch {epoch + 1}")
            return train_epoch(epoch)

        eng.train_epoch = crashing
    return eng.fit().to_json()


@pytest.mark.parametrize("engine", ["minibatch", "averaging"])
def test_resume_after_a_crash_equals_an_uninterrupted_run(make_store, tmp_path, engine):
    store = str(make_store(parts=2))
    ref = run_world(_fit, 2, store, engine, None, {})[0]
    ckpt = str(tmp_path / "ckpt")
    with pytest.raises(WorldFailed, match="simulated crash in epoch 4"):
        run_world(_fit, 2, store, engine, 3, {"checkpoint_dir": ckpt})
    last = json.loads((tmp_path / "ckpt" / "last.json").read_text())
    assert last["epoch"] == 3 and last["world_size"] == 2 and last["engine"] == engine
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("epoch*.pt")) == [
        "epoch3-rank0.pt",
        "epoch3-rank1.pt",
    ]
    assert (tmp_path / "ckpt" / "best.pt").exists()
    got = run_world(_fit, 2, store, engine, None, {"checkpoint_dir": ckpt, "resume": True})[0]
    assert [h["loss"] for h in got["history"]] == pytest.approx(
        [h["loss"] for h in ref["history"]], rel=1e-6
    )
    assert got["epochs"] == 6 and got["best_epoch"] == ref["best_epoch"]
    assert got["test_accuracy"] == ref["test_accuracy"]


@pytest.mark.parametrize("engine", ["minibatch", "averaging"])
def test_resume_on_another_number_of_processes(make_store, tmp_path, engine):
    """2 processes crash in epoch 3, 3 resume to epoch 4, 2 resume and finish: every epoch is
    trained once, the files of the larger world go, and the global batch (minibatch) stays
    2 x 4 seeds: ceil(8 / 3) = 3 per rank on 3 ranks."""
    store = str(make_store(parts=4))
    ckpt = tmp_path / "ckpt"
    kw = {"checkpoint_dir": str(ckpt)}
    with pytest.raises(WorldFailed, match="simulated crash in epoch 3"):
        run_world(_fit, 2, store, engine, 2, kw)
    three = run_world(_fit, 3, store, engine, None, {**kw, "resume": True, "epochs": 4})[0]
    assert three["config"]["sampling"]["batch_size"] == (3 if engine == "minibatch" else 4)
    last = json.loads((ckpt / "last.json").read_text())
    assert last["epoch"] == 4 and last["world_size"] == 3 and last["global_batch"] == 8
    got = run_world(_fit, 2, store, engine, None, {**kw, "resume": True})
    assert [h["epoch"] for h in got[0]["history"]] == [1, 2, 3, 4, 5, 6]
    assert got[0]["test_accuracy"] == got[1]["test_accuracy"]  # every rank: the same run
    assert got[0]["config"]["sampling"]["batch_size"] == 4
    last = json.loads((ckpt / "last.json").read_text())
    assert last["world_size"] == 2 and last["global_batch"] == 8
    assert sorted(p.name for p in ckpt.glob("epoch*.pt")) == ["epoch6-rank0.pt", "epoch6-rank1.pt"]
    ref = run_world(_fit, 2, store, engine, None, {})[0]
    assert got[0]["test_accuracy"] == pytest.approx(ref["test_accuracy"], abs=0.15)
    losses = [h["loss"] for h in got[0]["history"]]
    assert losses[:2] == pytest.approx([h["loss"] for h in ref["history"]][:2], rel=1e-6)
    assert losses[-1] < losses[0]  # it went on learning after both reshards


def _patience(rank: int, world: int, store: str, metrics: str):
    ctx = DistContext(rank=rank, world_size=world, local_rank=rank, backend="gloo", device=None)
    tc = TrainConfig.from_options(
        model="sage",
        fanouts=(3, 3),
        batch_size=4,
        hidden=8,
        epochs=20,
        lr=1e-12,  # nothing changes: validation never improves after the first evaluation
        seed=1,
        eval_every=1,
        patience=2,
        progress=False,
        metrics_file=metrics,
    )
    return get_engine("minibatch")(Store.open(store), tc, ctx).fit().to_json()


def test_patience_stops_every_rank_and_metrics_file_has_one_line_per_epoch(make_store, tmp_path):
    store = str(make_store(parts=2))
    metrics = tmp_path / "m" / "metrics.jsonl"
    out = run_world(_patience, 2, store, str(metrics))
    assert [r["epochs"] for r in out] == [3, 3]  # best at 1, then 2 evaluations without gain
    assert out[0]["best_epoch"] == 1
    lines = [json.loads(x) for x in metrics.read_text().splitlines()]
    assert [x["epoch"] for x in lines] == [1, 2, 3]  # rank 0 only: no duplicates
    assert all("val_accuracy" in x and "loss" in x for x in lines)


def test_resume_with_another_model_is_refused(make_store, tmp_path):
    store = str(make_store(parts=2))
    ckpt = str(tmp_path / "ckpt")
    run_world(_fit, 2, store, "averaging", None, {"checkpoint_dir": ckpt})
    kw = {"checkpoint_dir": ckpt, "resume": True, "model": "gcn"}
    with pytest.raises(WorldFailed, match="model 'sage', this run has 'gcn'") as exc:
        run_world(_fit, 2, store, "averaging", None, kw)
    assert "ShoalInputError" in str(exc.value.error) and "last.json" in str(exc.value.error)
    with pytest.raises(WorldFailed, match="engine 'averaging', this run has 'minibatch'"):
        run_world(_fit, 2, store, "minibatch", None, {"checkpoint_dir": ckpt, "resume": True})
