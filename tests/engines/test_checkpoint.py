"""Engines: per-epoch checkpoints with exact resume, early stopping, the metrics file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from shoal.distributed import DistContext
from shoal.engines import get_engine
from shoal.engines.config import read_config
from shoal.store import Store
from shoal.training import TrainConfig
from tests.distributed.helpers import WorldFailed, run_world

#: each engine's own options in these runs: fullgraph's dependency split from fixed costs
#: (probed costs could split it differently in two runs)
ENGINES = {
    "minibatch": {},
    "averaging": {},
    "hec": {},
    "fullgraph": {"deps": "hybrid", "dep_costs": (1.0, 1.0, 6.0)},
    "disagg": {},
}


def _model(sd: dict) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().copy() for k, v in sd.items()}


def _moments(sd: dict) -> dict[str, np.ndarray]:
    """An optimizer's floating state (Adam's moments) by ``"<parameter index>.<name>"``."""
    return {
        f"{p}.{name}": t.detach().cpu().numpy().copy()
        for p, st in sd["state"].items()
        for name, t in st.items()
        if torch.is_tensor(t) and t.is_floating_point() and name != "step"
    }


def _fit(rank: int, world: int, store: str, engine: str, crash_at: int | None, kw: dict):
    """Train (or resume); returns the result, the model and optimizer moments the engine
    holds right after loading a checkpoint (None without one) and the model after the last
    epoch trained."""
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
    tc = read_config({**options, "engine": engine, **ENGINES[engine], **kw})
    eng = get_engine(engine)(Store.open(store), tc, ctx)
    if crash_at is not None and rank == world - 1:
        train_epoch = eng.train_epoch

        def crashing(epoch: int):
            if epoch == crash_at:
                raise RuntimeError(f"simulated crash in epoch {epoch + 1}")
            return train_epoch(epoch)

        eng.train_epoch = crashing
    trained = {}
    train_epoch_ = eng.train_epoch

    def recording(epoch: int):  # the weights after the last epoch trained, before the best
        rec = train_epoch_(epoch)  # validation weights replace them for the final test
        trained["model"] = _model(eng.model.state_dict())
        return rec

    eng.train_epoch = recording
    loaded = {}
    load_state = eng.load_state

    def capturing(state: dict) -> None:  # what the engine holds once the checkpoint is in
        load_state(state)
        loaded["model"] = _model(eng.model.state_dict())
        loaded["moments"] = _moments(eng.optimizer.state_dict())

    eng.load_state = capturing
    result = eng.fit().to_json()
    return {"result": result, "loaded": loaded or None, "trained": trained.get("model")}


def _saved(directory: Path, epoch: int, world: int) -> list[dict]:
    """Every rank's checkpoint file of ``epoch``, read here, independently of the engines."""
    return [
        torch.load(directory / f"epoch{epoch}-rank{r}.pt", map_location="cpu", weights_only=True)
        for r in range(world)
    ]


def _assert_close(got: dict, want: dict, *, rtol: float = 1e-6, atol: float = 1e-7) -> None:
    assert sorted(got) == sorted(want)
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=rtol, atol=atol, err_msg=k)


def _losses(out: list[dict]) -> list[float]:
    return [h["loss"] for h in out[0]["result"]["history"]]


@pytest.mark.parametrize(
    ("engine", "own"),
    [
        pytest.param("minibatch", {}, id="minibatch"),
        pytest.param("averaging", {}, id="averaging"),
        # lines pushed in epoch 3's last steps are hit in epoch 4's first: the caches are
        # part of the checkpoint
        pytest.param("hec", {}, id="hec"),
        pytest.param("fullgraph", {}, id="fullgraph"),
        pytest.param("disagg", {}, id="disagg"),
    ],
)
def test_resume_after_a_crash_equals_an_uninterrupted_run(make_store, tmp_path, engine, own):
    """A crash in epoch 4, then a resume on as many processes: every rank loads its own
    file exactly and trains on to the uninterrupted run's losses, weights and accuracy."""
    store = str(make_store(parts=2))
    ref = run_world(_fit, 2, store, engine, None, own)
    ckpt = tmp_path / "ckpt"
    kw = {**own, "checkpoint_dir": str(ckpt)}
    with pytest.raises(WorldFailed, match="simulated crash in epoch 4"):
        run_world(_fit, 2, store, engine, 3, kw)
    last = json.loads((ckpt / "last.json").read_text())
    assert last["epoch"] == 3 and last["world_size"] == 2 and last["engine"] == engine
    assert sorted(p.name for p in ckpt.glob("epoch*.pt")) == ["epoch3-rank0.pt", "epoch3-rank1.pt"]
    assert (ckpt / "best.pt").exists()
    saved = _saved(ckpt, 3, 2)
    got = run_world(_fit, 2, store, engine, None, {**kw, "resume": True})
    for r in range(2):  # loaded as saved: a copy, bit for bit
        _assert_close(got[r]["loaded"]["model"], _model(saved[r]["model"]), rtol=0, atol=0)
        _assert_close(got[r]["loaded"]["moments"], _moments(saved[r]["optimizer"]), rtol=0, atol=0)
    assert _losses(got) == pytest.approx(_losses(ref), rel=1e-6)
    for r in range(2):
        _assert_close(got[r]["trained"], ref[r]["trained"], rtol=1e-5, atol=1e-6)
    res, want = got[0]["result"], ref[0]["result"]
    assert res["epochs"] == 6 and res["best_epoch"] == want["best_epoch"]
    assert res["test_accuracy"] == want["test_accuracy"]


def _expected(engine: str, saved: list[dict], *, mid_round: bool = False) -> dict:
    """The model and Adam moments a run resumed from ``saved`` (every saved rank's file) on
    another number of processes must start from on every rank: minibatch, saved rank 0's (the
    same on every saved rank: synchronous SGD); averaging, the saved ranks' weighted by their
    training nodes (``weight``), as an averaging round would leave them (``mid_round``: the
    saved ranks' models differ, so no one of them is the average)."""
    models = [_model(s["model"]) for s in saved]
    moments = [_moments(s["optimizer"]) for s in saved]
    if engine == "minibatch":
        for m, o in zip(models[1:], moments[1:], strict=True):
            _assert_close(m, models[0])
            _assert_close(o, moments[0])
        return {"model": models[0], "moments": moments[0]}
    w = [float(s["weight"]) for s in saved]
    if mid_round:
        assert any(not np.allclose(models[0][k], m[k]) for m in models[1:] for k in m)
    return {"model": _weighted(models, w), "moments": _weighted(moments, w)}


def _weighted(states: list[dict], weights: list[float]) -> dict:
    """``sum_i w_i states_i / sum_i w_i`` per tensor, in float64 (as float32)."""
    w = np.asarray(weights, np.float64)
    assert (w > 0).all()
    w = w / w.sum()
    return {
        k: sum(x * s[k].astype(np.float64) for x, s in zip(w, states, strict=True)).astype(
            np.float32
        )
        for k in states[0]
    }


def _assert_resumed_from(out: list[dict], want: dict) -> None:
    for o in out:  # every rank of the new world
        _assert_close(o["loaded"]["model"], want["model"])
        _assert_close(o["loaded"]["moments"], want["moments"])


@pytest.mark.parametrize("engine", ["minibatch", "averaging"])
def test_resume_on_another_number_of_processes(make_store, tmp_path, engine):
    """2 processes crash in epoch 3, 3 resume to epoch 4, 2 resume and finish: every rank of
    each new world starts from what the checkpoint holds (:func:`_expected`, read from the
    saved files), every epoch is trained once, the files of the larger world go, and the
    global batch (minibatch) stays 2 x 4 seeds: ceil(8 / 3) = 3 per rank on 3 ranks.
    Averaging runs rounds of 3 epochs with one model per rank, so that the first reshard
    (after epoch 2) falls mid-round, where the ranks' models differ."""
    store = str(make_store(parts=4))
    ckpt = tmp_path / "ckpt"
    own = {"average_every": 3, "part_models": False} if engine == "averaging" else {}
    kw = {"checkpoint_dir": str(ckpt), **own}
    with pytest.raises(WorldFailed, match="simulated crash in epoch 3"):
        run_world(_fit, 2, store, engine, 2, kw)
    want = _expected(engine, _saved(ckpt, 2, 2), mid_round=True)
    three = run_world(_fit, 3, store, engine, None, {**kw, "resume": True, "epochs": 4})
    _assert_resumed_from(three, want)
    assert three[0]["result"]["config"]["sampling"]["batch_size"] == (
        3 if engine == "minibatch" else 4
    )
    last = json.loads((ckpt / "last.json").read_text())
    assert last["epoch"] == 4 and last["world_size"] == 3 and last["global_batch"] == 8
    want = _expected(engine, _saved(ckpt, 4, 3))
    got = run_world(_fit, 2, store, engine, None, {**kw, "resume": True})
    _assert_resumed_from(got, want)
    res = [o["result"] for o in got]
    assert [h["epoch"] for h in res[0]["history"]] == [1, 2, 3, 4, 5, 6]
    assert res[0]["test_accuracy"] == res[1]["test_accuracy"]  # every rank: the same run
    assert res[0]["config"]["sampling"]["batch_size"] == 4
    last = json.loads((ckpt / "last.json").read_text())
    assert last["world_size"] == 2 and last["global_batch"] == 8
    assert sorted(p.name for p in ckpt.glob("epoch*.pt")) == ["epoch6-rank0.pt", "epoch6-rank1.pt"]
    ref = run_world(_fit, 2, store, engine, None, own)
    assert res[0]["test_accuracy"] == pytest.approx(ref[0]["result"]["test_accuracy"], abs=0.15)
    losses = _losses(got)
    assert losses[:2] == pytest.approx(_losses(ref)[:2], rel=1e-6)
    assert losses[-1] < losses[0]  # it went on learning after both reshards


def test_a_mid_round_reshard_averages_every_part_model(make_store, tmp_path):
    """One model per part (the default) and rounds of 3 epochs: the checkpoint after epoch 2
    holds each rank's part models apart (``model``: its first part's, ``part_models``: the
    others'); resumed on 3 processes, every rank starts from the 4 part models averaged,
    weighted by their parts' training nodes, as the round would have left them."""
    store = str(make_store(parts=4))
    ckpt = tmp_path / "ckpt"
    kw = {"checkpoint_dir": str(ckpt), "average_every": 3}
    with pytest.raises(WorldFailed, match="simulated crash in epoch 3"):
        run_world(_fit, 2, store, "averaging", 2, kw)
    saved = _saved(ckpt, 2, 2)
    s = Store.open(store)
    seeds = [int(np.count_nonzero(np.asarray(s.part(j).train_mask))) for j in range(4)]
    # part j on rank j mod 2: rank r's model is part r's, its part_models[0] part r + 2's
    models = [_model(saved[r]["model"]) for r in (0, 1)]
    models += [_model(saved[r]["part_models"][0][0]) for r in (0, 1)]
    three = run_world(_fit, 3, store, "averaging", None, {**kw, "resume": True, "epochs": 2})
    for o in three:
        _assert_close(o["loaded"]["model"], _weighted(models, seeds))


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
