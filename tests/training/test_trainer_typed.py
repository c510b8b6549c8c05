"""The one trainer on a typed graph: relational batches, one row source, exact evaluation
(``shoal train --graph TYPED``: R-GCN and R-GAT)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from shoal.cli import main
from shoal.data.synth.igbh import IGBHConfig, generate_igbh
from shoal.errors import ShoalInputError
from shoal.sample.sampler import NeighborSampler
from shoal.training import TrainConfig, inference
from shoal.training.data import TrainData
from shoal.training.trainer import Trainer


@pytest.fixture(scope="module")
def igbh(tmp_path_factory):
    out = tmp_path_factory.mktemp("typed_trainer") / "g"
    cfg = IGBHConfig(scale=0.01, features=8, classes=3, seed=3, featureless=("conference",))
    return generate_igbh(out, cfg, show_progress=False)


@pytest.fixture(scope="module")
def igbh4(tmp_path_factory):
    """IGBH-shaped, 4 planted classes that the relations tell (the papers' own features
    alone give about 0.35)."""
    out = tmp_path_factory.mktemp("tt") / "g"
    cfg = IGBHConfig(scale=0.02, features=16, classes=4, seed=4, featureless=("conference",))
    return generate_igbh(out, cfg, show_progress=False)


def _cfg(model: str, **kw) -> TrainConfig:
    opts = dict(model=model, fanouts=(5, 5), hidden=16, batch_size=256, epochs=8, lr=0.01)
    return TrainConfig.from_options(**{**opts, "threads": 1, "progress": False, **kw})


def _full_rows(data: TrainData, n_id: np.ndarray) -> torch.Tensor:
    x = np.zeros((len(n_id), data.feature_dim), np.float32)
    order = np.argsort(n_id)
    data.features.read(np.ascontiguousarray(n_id[order]), x, dest=order)
    return torch.from_numpy(x)


@pytest.mark.parametrize("model", ["rgcn", "rgat"])
def test_the_trainer_learns_a_typed_graph_and_evaluates_it_exactly(igbh, model):
    cfg = TrainConfig.from_dict(
        {
            "model": model,
            "hidden": 16,
            "heads": 2,
            "fanouts": [5, 5],
            "epochs": 4,
            "lr": 0.01,
            "batch_size": 128,
            "progress": False,
        }
    )
    data = TrainData.from_graph_dir(igbh)
    assert data.schema is not None and data.feature_dim == 8
    tr = Trainer(cfg, data)
    assert tr.tables is None  # auto: a few KiB of embeddings stay in the model
    res = tr.fit()
    assert res.test_accuracy > 0.45  # 3 balanced classes: chance is 1/3
    # the exact evaluation equals the model on every neighbour, L hops out, batch by batch
    model_ = tr.model.eval()
    val = np.asarray(data.val_idx)
    full = NeighborSampler(data.indptr, data.indices, [-1, -1], schema=data.schema)
    mb = full.sample(val)
    with torch.no_grad():
        pred = model_(_full_rows(data, mb.n_id), mb.with_node_ids()).argmax(1).numpy()
    labels = np.asarray(data.labels)[val]
    assert tr.evaluate(("val",))["val"] == pytest.approx(float(np.mean(pred == labels)), abs=1e-9)


@pytest.mark.parametrize("model", ["rgcn", "rgat"])
def test_relational_models_learn_the_planted_signal(igbh4, model):
    kw = {"heads": 2} if model == "rgat" else {}
    res = Trainer(_cfg(model, **kw), TrainData.from_graph_dir(igbh4)).fit()
    # 4 classes: chance is 0.25; the papers' own features alone give about 0.35
    assert res.test_accuracy > 0.6, res.test_accuracy
    assert res.epochs == 8 and res.engine == "single"


def test_the_same_seed_gives_the_same_run(igbh4):
    a = Trainer(_cfg("rgcn", epochs=2), TrainData.from_graph_dir(igbh4))
    ra = a.train_epoch(0)  # torch's random stream is global: one run at a time
    b = Trainer(_cfg("rgcn", epochs=2), TrainData.from_graph_dir(igbh4))
    rb = b.train_epoch(0)
    assert ra["loss"] == rb["loss"]
    for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert np.array_equal(p.detach().numpy(), q.detach().numpy())


def test_the_cli_trains_a_typed_graph_and_refuses_mismatched_models(igbh4, tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["train", "--graph", str(igbh4.path), "--model", "rgcn", "--fanouts", "4,4"]
    assert main([*args, "--epochs", "2", "--hidden", "8", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["epochs"] == 2 and 0 <= r["test_accuracy"] <= 1
    assert main(["train", "--graph", str(igbh4.path), "--model", "sage", "--epochs", "1"]) == 2
    assert "a typed graph trains a relational model" in capsys.readouterr().err
    # without --model a typed graph trains its relational default, R-GCN
    assert main(["train", "--graph", str(igbh4.path), "--epochs", "1", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["config"]["model"]["name"] == "rgcn"
    with pytest.raises(ShoalInputError, match="relational model"):
        from shoal.nn import build_model

        build_model("rgcn", in_dim=4, hidden=4, out_dim=2, num_layers=2, dropout=0.0)


@pytest.mark.parametrize("model", ["rgcn", "rgat"])
def test_layerwise_evaluation_equals_full_neighbourhood_batches(igbh4, model, monkeypatch):
    """Every layer once over the whole graph gives the logits of a forward pass over each
    node's full L-hop neighbourhood (dropout off); the layer arrays in memory or in files."""
    kw = {"heads": 2} if model == "rgat" else {}
    data = TrainData.from_graph_dir(igbh4)
    tr = Trainer(_cfg(model, epochs=1, **kw), data)
    tr.train_epoch(0)
    tr.model.eval()
    full = NeighborSampler(data.indptr, data.indices, [-1, -1], schema=data.schema)
    ids = np.sort(np.concatenate([data.val_idx[:30], data.test_idx[-20:]]))
    mb = full.sample(ids)
    with torch.no_grad():
        ref = tr.model(_full_rows(data, mb.n_id), mb.with_node_ids()).numpy()
    for spill in (False, True):
        if spill:  # every layer's array a file in the scratch directory
            monkeypatch.setattr(inference, "INFERENCE_MEMMAP_BYTES", 0)
        got = inference.layerwise_inference(tr.model, data, ids, batch_size=64)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    assert 0 <= tr.evaluate(("val", "test"))["test"] <= 1


def test_a_memory_budget_caches_part_of_the_rows_and_trains_the_same(tmp_path, monkeypatch):
    """Rows come from the cache or the files alike: a budget that caches a part of the
    features trains loss for loss as one that caches them all, and reads the rest."""
    import shoal.training.trainer as trainer

    # features (44 MB) larger than the plan's smallest window (16 MiB)
    cfg = IGBHConfig(scale=0.02, features=1024, classes=4, seed=4, train_frac=0.2)
    g = generate_igbh(tmp_path / "wide", cfg, show_progress=False)
    # the process's measured footprint, fixed: the plans below differ only by the limit
    monkeypatch.setattr(trainer, "training_reserve", lambda *a, **kw: 200 << 20)
    full = Trainer(_cfg("rgcn", epochs=2, batch_size=64), TrainData.from_graph_dir(g))
    plan = full.budget
    assert plan.cache == plan.features  # everything fits: all cached
    ra = [full.train_epoch(e) for e in range(2)]
    assert all(r["io"]["bytes_read"] == 0 for r in ra)
    limit = plan.reserve + plan.structure + 2 * plan.min_window + plan.features // 3
    part = Trainer(_cfg("rgcn", epochs=2, batch_size=64, memory=limit), TrainData.from_graph_dir(g))
    assert 0 < part.budget.cache < plan.features, (part.budget, plan)
    rb = [part.train_epoch(e) for e in range(2)]
    assert [r["loss"] for r in rb] == pytest.approx([r["loss"] for r in ra], rel=1e-6)
    io = rb[0]["io"]
    assert io["bytes_read"] > 0 and 0 < io["hits"] < io["requested"], io
    with pytest.raises(ShoalInputError, match="minimum working set"):
        Trainer(_cfg("rgcn", epochs=1, memory=plan.reserve // 2), TrainData.from_graph_dir(g))


def test_a_sampled_validation_of_a_typed_graph_with_every_neighbour_is_the_exact_one(igbh):
    """--eval-fanouts on a typed graph: every relation's neighbours sampled from the same
    streams at each call; with every neighbour (-1) the accuracy is the exact evaluation's
    (R-GCN's layer loop over the receptive field) up to a near-tie."""
    tr = Trainer(_cfg("rgcn", epochs=1, batch_size=128), TrainData.from_graph_dir(igbh))
    tr.fit()
    tr2 = Trainer(_cfg("rgcn", epochs=1, batch_size=128), TrainData.from_graph_dir(igbh))
    tr2.model.load_state_dict(tr.model.state_dict())
    exact = tr2.evaluate(("val", "test"))
    every = tr2.evaluate(("val", "test"), fanouts=(-1, -1))
    for s in exact:
        n = len(tr2.data.split(s))
        assert abs(every[s] - exact[s]) <= 1.0 / n + 1e-12, s
    once = tr2.evaluate(("val",), fanouts=(2, 2))
    assert tr2.evaluate(("val",), fanouts=(2, 2)) == once
