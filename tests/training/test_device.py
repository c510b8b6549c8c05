"""Training on a device: the feed of batches, the trainer, the CLI's --device."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.graph.blocks import Batch
from shoal.training import TrainConfig, Trainer
from shoal.training.device import DeviceFeed
from tests.training.test_linktask import cora_link  # noqa: F401  (fixture)
from tests.training.test_trainer import cfg, tiny  # noqa: F401  (fixture)

CUDA = torch.cuda.is_available()


def _batches(trainer: Trainer, epoch: int = 0) -> list[Batch]:
    return list(trainer.loader.epoch(epoch))


def test_config_checks_the_device_spelling():
    assert TrainConfig.from_options(device="cuda:1").run.device == "cuda:1"
    assert TrainConfig().run.device == "cpu"
    with pytest.raises(ValueError, match="device must be"):
        TrainConfig.from_options(device="gpu")


def test_cpu_feed_passes_batches_through(tiny):  # noqa: F811
    t = Trainer(cfg(), tiny)
    batches = _batches(t)
    feed = DeviceFeed("cpu")
    got = list(feed.iterate(iter(batches)))
    assert len(got) == len(batches) and all(a is b for a, b in zip(got, batches, strict=True))
    assert feed.to_device(batches[0]) is batches[0]
    assert feed.bytes_copied == 0


def test_batch_to_keeps_its_values(tiny):  # noqa: F811
    b = _batches(Trainer(cfg(), tiny))[0]
    m = b.to("cpu")
    assert torch.equal(m.x, b.x) and torch.equal(m.y, b.y)
    assert all(torch.equal(p.edge_index, q.edge_index) for p, q in zip(m.mb.blocks, b.mb.blocks))


def test_trainer_records_its_device(tiny):  # noqa: F811
    t = Trainer(cfg(device="cpu", epochs=1), tiny)
    r = t.fit()
    assert r.config["run"]["device"] == "cpu"
    assert t.device == torch.device("cpu")
    assert next(t.model.parameters()).device.type == "cpu"
    assert set(t.state()["torch_rng"]) == {"cpu"}


@pytest.mark.skipif(CUDA, reason="this machine has a GPU: the error is for machines without")
def test_cuda_on_a_cpu_machine_exits_2_naming_the_fix(tiny, run_cli):  # noqa: F811
    code, _, err = run_cli("train", "--graph", tiny.path, "--device", "cuda", "--epochs", "1")
    assert code == 2
    assert "torch.cuda.is_available() is False" in err and "--device cpu" in err


def test_bad_device_spelling_exits_2(tiny, capsys):  # noqa: F811
    from shoal.cli import main

    with pytest.raises(SystemExit) as e:
        main(["train", "--graph", str(tiny.path), "--device", "gpu"])
    assert e.value.code == 2
    assert "cuda:<index>" in capsys.readouterr().err


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cuda_feed_double_buffers_into_device_tensors(tiny):  # noqa: F811
    batches = _batches(Trainer(cfg(), tiny))
    feed = DeviceFeed("cuda")
    got = list(feed.iterate(iter(batches)))
    assert len(got) == len(batches)
    for g, b in zip(got, batches, strict=True):
        assert g.x.device.type == "cuda" and torch.equal(g.x.cpu(), b.x)
        assert torch.equal(g.y.cpu(), b.y)
        assert all(blk.edge_index.device.type == "cuda" for blk in g.mb.blocks)
    assert feed.bytes_copied == sum(b.x.numel() * 4 for b in batches)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cuda_background_feed_stages_each_batch_before_the_next_is_produced(tiny):  # noqa: F811
    """The background thread samples and gathers the next batch while one is used; the
    loader reuses its feature buffer, so each batch must be staged before the next one is
    produced: the device batches equal the host batches taken one at a time."""
    trainer = Trainer(cfg(), tiny)
    ref = [(b.x.clone(), b.y.clone()) for b in trainer.loader.epoch(0)]
    feed = DeviceFeed("cuda", background=True)
    got = [(g.x.cpu(), g.y.cpu()) for g in feed.iterate(trainer.loader.epoch(0))]
    assert len(got) == len(ref)
    for (gx, gy), (rx, ry) in zip(got, ref, strict=True):
        assert torch.equal(gx, rx) and torch.equal(gy, ry)
    it = feed.iterate(trainer.loader.epoch(1))  # stopped early: the thread ends
    next(it)
    it.close()


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cuda_training_matches_the_cpu(tiny):  # noqa: F811
    """Without dropout, one run on the GPU and one on the CPU give the same losses and
    validation accuracies to float tolerance."""
    runs = [Trainer(cfg(device=d, dropout=0.0, epochs=3), tiny).fit() for d in ("cpu", "cuda")]
    for a, b in zip(runs[0].history, runs[1].history, strict=True):
        assert abs(a["loss"] - b["loss"]) < 1e-4
        assert a.get("val_accuracy") == b.get("val_accuracy")
    np.testing.assert_allclose(runs[0].test_accuracy, runs[1].test_accuracy)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cuda_training_with_keyed_dropout_matches_the_cpu(tiny):  # noqa: F811
    """Dropout masks are keyed by (seed, epoch, step, node) and drawn on the model's device
    with the CPU kernel's bits: with dropout on, GPU and CPU runs still train the same model
    (losses to float tolerance)."""
    runs = [Trainer(cfg(device=d, dropout=0.5, epochs=3), tiny).fit() for d in ("cpu", "cuda")]
    for a, b in zip(runs[0].history, runs[1].history, strict=True):
        assert abs(a["loss"] - b["loss"]) < 1e-4


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("sample_on", ["host", "device"])
def test_cuda_out_of_core_training_matches_in_memory_cpu(make_graph, monkeypatch, sample_on):
    """Features read ahead from disk in windows under a small budget, then staged through
    pinned buffers to the GPU (``host``), or sampled on the GPU with a third of the rows
    cached there and the others gathered by the host's budgeted store (``device``): the same
    losses and evaluation as the whole matrix in memory on the CPU."""
    import shoal.rows.budget as budget_mod
    import shoal.training.trainer as trainer_mod
    from shoal.rows.budget import RESERVE
    from shoal.sample.device import DeviceSampler
    from shoal.training import TrainData
    from tests.rows.test_prefetch import _graph

    monkeypatch.setattr(trainer_mod, "training_reserve", lambda *a, **k: RESERVE)
    monkeypatch.setattr(trainer_mod, "step_activations", lambda *a, **k: (0, 0))
    monkeypatch.setattr(budget_mod, "MIN_WINDOW", 4096)
    graph = _graph(make_graph, 64)
    base = dict(
        model="sage", fanouts=(5, 5), batch_size=8, hidden=8, epochs=2, threads=1, progress=False
    )
    big = Trainer(TrainConfig.from_options(**base, memory="8GiB"), TrainData.from_graph_dir(graph))
    data = TrainData.from_graph_dir(graph)
    nodes = data.num_nodes
    structure = DeviceSampler.nbytes(nodes, len(data.indices), nodes)
    device_memory = structure + (nodes // 3) * (4 * data.feature_dim + 4)
    small = Trainer(
        TrainConfig.from_options(
            **base,
            memory=RESERVE + 250_000,
            device="cuda",
            sample_on=sample_on,
            device_memory=device_memory,
        ),
        data,
    )
    assert big.loader.prefetcher is None
    if sample_on == "host":
        assert small.loader.prefetcher is not None and small.device_batches is None
    else:
        assert small.device_batches.rows.cached == nodes // 3
    for e in range(2):
        a, b = big.train_epoch(e), small.train_epoch(e)
        assert abs(a["loss"] - b["loss"]) < 1e-4
        assert b["io"]["bytes_read"] > 0
        if sample_on == "device":
            assert b["io"]["rows_host"] > 0 and b["io"]["rows_device"] > 0
    for p, q in zip(big.model.parameters(), small.model.parameters(), strict=True):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().cpu().numpy(), atol=1e-4)
    small.end_training()
    got, ref = small.evaluate(("val", "test")), big.evaluate(("val", "test"))
    for s in ("val", "test"):  # ties in argmax are unlikely; allow two nodes
        assert abs(got[s] - ref[s]) <= 2 / 300 + 1e-12


@pytest.fixture(scope="module")
def igbh(tmp_path_factory):
    """An IGBH-shaped typed graph (a featureless type included)."""
    from shoal.data.synth.igbh import IGBHConfig, generate_igbh

    cfg_ = IGBHConfig(scale=0.01, features=8, classes=3, seed=1, featureless=("conference",))
    return generate_igbh(tmp_path_factory.mktemp("typed_device") / "g", cfg_, show_progress=False)


def _typed_run(graph, device: str, model: str):
    """R-GCN or R-GAT on ``device``, without dropout; the run differs only in the device."""
    from shoal.training import TrainData

    kw = dict(model=model, device=device, dropout=0.0, fanouts=(5, 5), hidden=16, batch_size=128)
    kw |= {"heads": 2} if model == "rgat" else {}
    return Trainer(cfg(**kw), TrainData.from_graph_dir(graph)).fit()


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("model", ["rgcn", "rgat"])
def test_cuda_typed_training_matches_the_cpu(igbh, model):
    """A typed graph's relational batches on the GPU: the CPU run's losses and accuracies."""
    runs = [_typed_run(igbh, d, model) for d in ("cpu", "cuda")]
    assert runs[1].config["run"]["device"] == "cuda"
    for a, b in zip(runs[0].history, runs[1].history, strict=True):
        assert abs(a["loss"] - b["loss"]) < 1e-4
    # per-relation sums in another order on the GPU: a node may flip at a tie; allow two
    assert abs(runs[0].test_accuracy - runs[1].test_accuracy) <= 2 / len(igbh.split("test"))


def _link_run(graph, device: str):
    from shoal.training.link_config import LinkConfig
    from shoal.training.linkdata import LinkData
    from tests.training.test_linktask import LinkTrainer
    from tests.training.test_linktask import cfg as link_cfg

    data = LinkData.from_graph_dir(graph)
    return LinkTrainer(link_cfg(device=device, epochs=2), LinkConfig(num_neg=2), data).fit()


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_cuda_link_prediction_matches_the_cpu(cora_link):  # noqa: F811
    """``--task link`` on a split Cora: the GPU run's losses and MRR are the CPU run's."""
    runs = [_link_run(cora_link, d).to_json() for d in ("cpu", "cuda")]
    assert runs[1]["config"]["run"]["device"] == "cuda"
    for a, b in zip(runs[0]["history"], runs[1]["history"], strict=True):
        assert abs(a["loss"] - b["loss"]) < 1e-4
    assert runs[1]["test_mrr"] == pytest.approx(runs[0]["test_mrr"], abs=1e-3)
