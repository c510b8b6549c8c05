"""Single-process training of R-GCN and R-GAT on a typed graph (``shoal train --graph``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shoal.cli import main
from shoal.data.synth.igbh import IGBHConfig, generate_igbh
from shoal.errors import ShoalInputError
from shoal.training import TrainConfig
from shoal.training.typed import TypedTrainer


@pytest.fixture(scope="module")
def igbh(tmp_path_factory):
    out = tmp_path_factory.mktemp("tt") / "g"
    cfg = IGBHConfig(scale=0.02, features=16, classes=4, seed=4, featureless=("conference",))
    return generate_igbh(out, cfg, show_progress=False)


def _cfg(model: str, **kw) -> TrainConfig:
    opts = dict(model=model, fanouts=(5, 5), hidden=16, batch_size=256, epochs=8, lr=0.01)
    return TrainConfig.from_options(**{**opts, "threads": 1, "progress": False, **kw})


@pytest.mark.parametrize("model", ["rgcn", "rgat"])
def test_relational_models_learn_the_planted_signal(igbh, model):
    kw = {"heads": 2} if model == "rgat" else {}
    res = TypedTrainer(_cfg(model, **kw), igbh).fit()
    # 4 classes: chance is 0.25; the papers' own features alone give about 0.35
    assert res.test_accuracy > 0.6, res.test_accuracy
    assert res.epochs == 8 and res.engine == "single"


def test_the_same_seed_gives_the_same_run(igbh):
    a = TypedTrainer(_cfg("rgcn", epochs=2), igbh)
    ra = a.train_epoch(0)  # torch's random stream is global: one run at a time
    b = TypedTrainer(_cfg("rgcn", epochs=2), igbh)
    rb = b.train_epoch(0)
    assert ra["loss"] == rb["loss"]
    for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert np.array_equal(p.detach().numpy(), q.detach().numpy())


def test_the_cli_trains_a_typed_graph_and_refuses_mismatched_models(igbh, tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["train", "--graph", str(igbh.path), "--model", "rgcn", "--fanouts", "4,4"]
    assert main([*args, "--epochs", "2", "--hidden", "8", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["epochs"] == 2 and 0 <= r["test_accuracy"] <= 1
    assert main(["train", "--graph", str(igbh.path), "--model", "sage", "--epochs", "1"]) == 2
    assert "a typed graph trains a relational model" in capsys.readouterr().err
    # without --model a typed graph trains its relational default, R-GCN
    assert main(["train", "--graph", str(igbh.path), "--epochs", "1", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["config"]["model"]["name"] == "rgcn"
    with pytest.raises(ShoalInputError, match="relational model"):
        from shoal.nn import build_model

        build_model("rgcn", in_dim=4, hidden=4, out_dim=2, num_layers=2, dropout=0.0)


def test_a_gpu_is_refused_until_typed_training_supports_it(igbh):
    with pytest.raises(ShoalInputError, match="typed graphs train on the CPU"):
        TypedTrainer(_cfg("rgcn", device="cuda"), igbh)


def test_a_memory_budget_caches_part_of_the_rows_and_trains_the_same(tmp_path, monkeypatch):
    """Rows come from the cache or the files alike: a budget that caches a third of the
    features trains loss for loss as one that caches them all, and reads the rest."""
    import shoal.training.typed as typed

    # features (44 MB) larger than the plan's smallest window (16 MiB)
    cfg = IGBHConfig(scale=0.02, features=1024, classes=4, seed=4, train_frac=0.2)
    igbh = generate_igbh(tmp_path / "wide", cfg, show_progress=False)
    # the process's measured footprint, fixed: the plans below differ only by the limit
    monkeypatch.setattr(typed, "reserve_for", lambda working, **kw: 200 << 20)
    full = TypedTrainer(_cfg("rgcn", epochs=2), igbh)
    plan = full.budget
    assert full.features.cache_bytes == plan.features  # everything fits: all cached
    ra = [full.train_epoch(e) for e in range(2)]
    assert all(r["io"]["bytes_read"] == 0 for r in ra)
    limit = plan.reserve + plan.structure + 2 * plan.window + plan.features // 3
    part = TypedTrainer(_cfg("rgcn", epochs=2, memory=limit), igbh)
    assert 0 < part.features.cache_bytes < plan.features
    rb = [part.train_epoch(e) for e in range(2)]
    assert [r["loss"] for r in rb] == pytest.approx([r["loss"] for r in ra], rel=1e-6)
    io = rb[0]["io"]
    assert io["bytes_read"] > 0 and 0 < io["hits"] < io["requested"]
    assert io["unique_rows"] <= igbh.num_nodes and io["unique_bytes"] > 0
    with pytest.raises(ShoalInputError, match="minimum working set"):
        TypedTrainer(_cfg("rgcn", epochs=1, memory=plan.reserve // 2), igbh)


@pytest.mark.parametrize("model", ["rgcn", "rgat"])
def test_layerwise_evaluation_equals_full_neighbourhood_batches(igbh, model, tmp_path):
    """Every layer once over the whole graph gives the logits of a forward pass over each
    node's full L-hop neighbourhood (dropout off); in memory or with the tables on disk."""
    import torch

    from shoal.sample.typed import TypedNeighborSampler
    from shoal.training.typed_inference import layerwise_logits

    kw = {"heads": 2} if model == "rgat" else {}
    tr = TypedTrainer(_cfg(model, epochs=1, **kw), igbh)
    tr.train_epoch(0)
    tr.model.eval()
    csr = igbh.csr("in")
    full = TypedNeighborSampler(csr.indptr, csr.indices, igbh.schema, [-1, -1])
    ids = np.sort(np.concatenate([tr.splits["val"][:30], tr.splits["test"][-20:]]))
    with torch.no_grad():
        tb = full.sample(ids)
        ref = tr.model(tb, tr.features.gather(tb)).numpy()
    for scratch in (None, tmp_path):
        got = layerwise_logits(
            tr.model, ids, one_hop=tr.one_hop, features=tr.features, max_rows=500, scratch=scratch
        ).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    assert 0 <= tr.evaluate(("val", "test"))["test"] <= 1
