"""Trainer: config validation, exact layer-wise inference, checkpoints, early stopping, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from shoal.engines.config import read_config_file
from shoal.errors import ShoalInputError
from shoal.graph import full_graph_block
from shoal.training import (
    TrainConfig,
    TrainData,
    Trainer,
    layerwise_inference,
    load_checkpoint,
    save_checkpoint,
    train_step,
)

CORA = Path(__file__).resolve().parents[2] / "src/shoal/data/datasets/cora/graph.npz"


@pytest.fixture
def tiny(make_graph):
    """Two 12-node communities (ring + chords) whose labels follow the community."""
    rng = np.random.default_rng(0)
    n = 24
    edges = []
    for c in range(2):
        base = 12 * c
        for i in range(12):
            edges.append((base + i, base + (i + 1) % 12))
            edges.append((base + i, base + (i + 5) % 12))
    edges.append((0, 12))
    e = np.array(edges)
    e = np.concatenate([e, e[:, ::-1]])
    y = np.repeat([0, 1], 12)
    x = rng.normal(size=(n, 5)).astype(np.float32) + y[:, None] * 0.5
    g = make_graph(
        e, n, x=x, y=y, train=[0, 1, 2, 12, 13, 14], val=[3, 4, 15, 16], test=[5, 6, 7, 17, 18]
    )
    return TrainData.from_graph_dir(g)


def cfg(**kw):
    base = dict(
        model="sage",
        fanouts=(3, 3),
        batch_size=4,
        hidden=8,
        epochs=3,
        lr=0.01,
        threads=1,
        progress=False,
        eval_every=1,
    )
    base.update(kw)
    return TrainConfig.from_options(**base)


def test_config_validation_and_toml(tmp_path):
    with pytest.raises(ValueError, match="valid names"):
        TrainConfig.from_options(model="transformer")
    with pytest.raises(ValueError, match="dropout"):
        TrainConfig.from_options(dropout=1.0)
    with pytest.raises(ValueError, match="fanout"):
        TrainConfig.from_options(fanouts=(0,))
    with pytest.raises(TypeError):
        TrainConfig("sage")  # keyword-only
    p = tmp_path / "c.toml"
    p.write_text('[train]\nmodel = "gcn"\nfanouts = [-1, -1]\nhidden = 16\n')
    c = read_config_file(p, {"hidden": 32})
    assert (c.model.name, c.sampling.fanouts, c.model.hidden) == ("gcn", (-1, -1), 32)
    p.write_text("hiden = 3\n")
    with pytest.raises(ShoalInputError, match="hiden"):
        read_config_file(p)


def test_fanouts_input_first_is_dgls_order(tiny, tmp_path):
    c = TrainConfig.from_options(fanouts=(5, 10, 15), fanouts_order="input-first")
    assert (c.sampling.fanouts, c.sampling.fanouts_order) == ((15, 10, 5), "hop-first")
    assert TrainConfig.from_dict(c.to_dict()).sampling.fanouts == (15, 10, 5)  # not reversed twice
    with pytest.raises(ValueError, match="fanouts_order"):
        TrainConfig.from_options(fanouts_order="dgl")
    p = tmp_path / "c.toml"
    p.write_text('fanouts = [1, 3]\nfanouts_order = "input-first"\n')
    assert read_config_file(p).sampling.fanouts == (3, 1)
    # the same sampler: hop 1 draws 3 neighbours, hop 2 one, in both spellings
    a = Trainer(cfg(fanouts=(3, 1)), tiny)
    b = Trainer(cfg(fanouts=(1, 3), fanouts_order="input-first"), tiny)
    ba, bb = next(iter(a.loader.epoch(0))).mb, next(iter(b.loader.epoch(0))).mb
    assert np.array_equal(ba.n_id, bb.n_id)
    assert [blk.edge_index.shape[1] for blk in ba.blocks] == [
        blk.edge_index.shape[1] for blk in bb.blocks
    ]


@pytest.mark.parametrize("hidden", [8, 4])  # 4 < 5 input features: node-wise projection first
@pytest.mark.parametrize("model", ["sage", "gcn", "gat", "gin", "sgc"])
def test_layerwise_inference_is_exact(tiny, model, hidden):
    tr = Trainer(cfg(model=model, fanouts=(2, 2), hidden=hidden, heads=2), tiny)
    tr.model.eval()
    fb = full_graph_block(tiny.indptr, tiny.indices, num_nodes=tiny.num_nodes)
    x = torch.from_numpy(np.array(tiny.features))
    with torch.no_grad():
        full = tr.model(x, [fb, fb]).numpy()
    nodes = np.array([3, 17, 0, 23])
    got = layerwise_inference(tr.model, tiny, nodes, batch_size=5)
    assert np.allclose(got, full[nodes], atol=1e-5)


def test_training_learns_and_reports(tiny, tmp_path):
    metrics = tmp_path / "m.jsonl"
    r = Trainer(cfg(epochs=30, metrics_file=str(metrics), dropout=0.0, lr=0.05), tiny).fit()
    assert r.epochs == 30 and r.test_accuracy >= 0.8
    lines = [json.loads(s) for s in metrics.read_text().splitlines()]
    assert len(lines) == 30 and lines[-1]["loss"] < lines[0]["loss"]
    assert {"sampling", "gather", "forward_backward"} <= set(r.time_split)
    assert r.val_accuracy == max(x["val_accuracy"] for x in lines)
    # every row cached: the cache's load (before the first epoch) is the first record's start
    starts = [x["io"].get("start_seconds") for x in lines]
    assert starts[0] is not None and starts[0] > 0 and not any(starts[1:])


def test_checkpoint_round_trip_gives_identical_next_step(tiny, tmp_path):
    a = Trainer(cfg(dropout=0.5), tiny)
    a.train_epoch()
    save_checkpoint(tmp_path / "last.pt", a.state())
    batch = next(iter(a.loader.epoch(a.epoch)))
    loss_a, _ = train_step(a.model, a.optimizer, batch)

    torch.manual_seed(123)  # a different RNG state, restored by the checkpoint
    b = Trainer(cfg(dropout=0.5, seed=0), tiny)
    b.load_state(load_checkpoint(tmp_path / "last.pt"))
    assert b.epoch == 1
    batch_b = next(iter(b.loader.epoch(b.epoch)))
    loss_b, _ = train_step(b.model, b.optimizer, batch_b)
    assert loss_a == loss_b
    for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_resume_reaches_the_same_model(tiny, tmp_path):
    full = Trainer(cfg(epochs=4), tiny)
    r_full = full.fit()
    d = tmp_path / "ck"
    Trainer(cfg(epochs=2, checkpoint_dir=str(d)), tiny).fit()
    assert (d / "last.pt").exists() and (d / "best.pt").exists()
    resumed = Trainer(cfg(epochs=4, checkpoint_dir=str(d), resume=True), tiny)
    r_res = resumed.fit()
    assert r_res.epochs == 4 and r_res.test_accuracy == r_full.test_accuracy
    for pa, pb in zip(full.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_bad_checkpoint_is_a_clear_error(tmp_path):
    p = tmp_path / "bad.pt"
    p.write_bytes(b"not a checkpoint")
    with pytest.raises(ShoalInputError, match="bad.pt"):
        load_checkpoint(p)


def test_early_stopping(tiny):
    r = Trainer(cfg(epochs=50, patience=2, lr=1e-12), tiny).fit()
    assert r.epochs == 3 and r.best_epoch == 1


def test_missing_node_data_is_rejected(make_graph):
    g = make_graph([(0, 1), (1, 0)], 2)
    with pytest.raises(ShoalInputError, match="features"):
        TrainData.from_graph_dir(g)


def test_cli_json_keys_on_bundled_cora(tmp_path, run_cli):
    from shoal.data.importers import import_graph

    import_graph(CORA, tmp_path / "cora")
    out = tmp_path / "r.json"
    code, _, err = run_cli(
        "train",
        "--graph",
        tmp_path / "cora",
        "--model",
        "gcn",
        "--fanouts",
        "all,all",
        "--hidden",
        "16",
        "--epochs",
        "20",
        "--batch-size",
        "140",
        "--lr",
        "0.01",
        "--weight-decay",
        "5e-4",
        "--normalize-features",
        "--threads",
        "1",
        "--no-progress",
        "--json",
        out,
    )
    assert code == 0, err
    r = json.loads(out.read_text())
    for key in (
        "test_accuracy",
        "val_accuracy",
        "epochs",
        "seconds_per_epoch",
        "time_split",
        "sampling_seconds_per_epoch",
        "gather_seconds_per_epoch",
        "forward_backward_seconds_per_epoch",
    ):
        assert key in r
    assert r["epochs"] == 20 and r["test_accuracy"] > 0.6


def test_help_explains_the_fanout_order(capsys):
    from shoal.cli import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "hop 1 first" in out and "DGL [5, 10, 15] is --fanouts 15,10,5" in out
    assert "--fanouts-order" in out
    assert "--eval-fanouts" in out and "the final evaluation stays exact" in out


def test_a_bad_eval_fanout_is_refused_by_the_cli(tmp_path, capsys):
    from shoal.cli import main

    with pytest.raises(SystemExit) as e:
        main(["train", "--graph", str(tmp_path), "--eval-fanouts", "5,0"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--eval-fanouts" in err and "positive integer or -1" in err


def test_cli_errors(tmp_path, run_cli):
    code, _, err = run_cli("train", "--model", "sage")
    assert code == 2 and "--graph" in err
    p = tmp_path / "c.toml"
    p.write_text("epochs = -1\n")
    code, _, err = run_cli("train", "--graph", tmp_path, "--config", p)
    assert code == 2 and "epochs" in err


def test_resume_restores_history_and_refuses_another_run(tiny, tmp_path, run_cli):
    d = tmp_path / "ck"
    first = Trainer(cfg(epochs=2, checkpoint_dir=str(d)), tiny).fit()
    resumed = Trainer(cfg(epochs=4, checkpoint_dir=str(d), resume=True), tiny).fit()
    full = Trainer(cfg(epochs=4), tiny).fit()
    # the resumed run's history holds all 4 epochs, the first 2 exactly as first trained
    assert [h["epoch"] for h in resumed.history] == [1, 2, 3, 4]
    assert [h["loss"] for h in resumed.history[:2]] == [h["loss"] for h in first.history]
    assert [h["loss"] for h in resumed.history] == pytest.approx([h["loss"] for h in full.history])
    # another model (or width) cannot resume from it: a clear error naming checkpoint and option
    with pytest.raises(ShoalInputError, match=r"last\.pt.*model 'sage', this run has 'gcn'"):
        Trainer(cfg(model="gcn", epochs=5, checkpoint_dir=str(d), resume=True), tiny).fit()
    with pytest.raises(ShoalInputError, match=r"hidden 8, this run has 16"):
        Trainer(cfg(hidden=16, epochs=5, checkpoint_dir=str(d), resume=True), tiny).fit()


def test_resume_refuses_a_checkpoint_of_another_dataset(tiny, make_graph, tmp_path, run_cli):
    d = tmp_path / "ck"
    Trainer(cfg(epochs=1, checkpoint_dir=str(d)), tiny).fit()
    rng = np.random.default_rng(1)
    e = np.array([(i, (i + 1) % 30) for i in range(30)])
    other = make_graph(
        e,
        30,
        x=rng.normal(size=(30, 5)).astype(np.float32),
        y=np.arange(30) % 2,
        train=[0, 1, 2],
        val=[3, 4],
        test=[5, 6],
        name="other",
    )
    code, _, err = run_cli(
        "train",
        "--graph",
        other.path,
        "--model",
        "sage",
        "--fanouts",
        "3,3",
        "--hidden",
        "8",
        "--batch-size",
        "4",
        "--epochs",
        "2",
        "--threads",
        "1",
        "--no-progress",
        "--checkpoint-dir",
        d,
        "--resume",
    )
    assert code == 2
    assert "last.pt" in err and "num_nodes 24, this run has 30" in err


def test_inference_arrays_go_to_the_scratch_dir_not_the_system_temp(tiny, tmp_path, monkeypatch):
    import tempfile

    from shoal.training import blocked, inference

    systmp = tmp_path / "systmp"
    systmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(systmp))
    tr = Trainer(cfg(), tiny)
    nodes = np.arange(tiny.num_nodes)
    in_memory = layerwise_inference(tr.model, tiny, nodes)
    monkeypatch.setattr(inference, "INFERENCE_MEMMAP_BYTES", 0)  # every layer to a file
    monkeypatch.setattr(blocked, "KEEP_SHARE", 0.0)  # (none kept in the working memory)
    seen: list[Path] = []
    array = inference.Scratch.array

    def spy(self, rows, cols):
        a = array(self, rows, cols)
        seen.append(Path(a.filename))
        return a

    monkeypatch.setattr(inference.Scratch, "array", spy)
    scratch = tmp_path / "scratch"
    got = layerwise_inference(tr.model, tiny, nodes, scratch_dir=scratch)
    assert np.array_equal(got, in_memory)
    assert seen and all(p.parent.parent == scratch for p in seen)
    assert list(scratch.iterdir()) == []  # removed afterwards
    seen.clear()
    layerwise_inference(tr.model, tiny, nodes)  # default: beside the graph directory
    assert seen and all(p.parent.parent == Path(tiny.path).parent for p in seen)
    # (PyG writes its own jit templates there; shoal writes nothing)
    assert [p for p in systmp.iterdir() if "shoal" in p.name or p.suffix == ".npy"] == []


def test_distributed_options_come_from_toml_too(tmp_path):
    p = tmp_path / "run.toml"
    p.write_text(
        '[train]\nengine = "averaging"\nnproc = 2\naverage_every = 3\n'
        'average_optimizer = false\nscratch_dir = "/data/scratch"\nmax_restarts = 1\n'
    )
    c = read_config_file(p, {"nproc": 4})
    e = c.engine
    assert (e.name, e.nproc, e.average_every, e.average_optimizer) == ("averaging", 4, 3, False)
    assert (c.memory.scratch_dir, e.max_restarts) == ("/data/scratch", 1)
    p.write_text('[train]\nengine = "averaging"\naverage_every = 0\n')
    with pytest.raises(ShoalInputError, match="average_every must be >= 1"):
        read_config_file(p)
    p.write_text("[train]\naverage_every = 2\n")  # an option of another engine than the run's
    with pytest.raises(ShoalInputError, match="belongs to the averaging engine"):
        read_config_file(p)


def test_eval_test_records_the_test_accuracy_of_every_evaluation(tiny):
    r = Trainer(cfg(epochs=6, eval_every=2, eval_test=True, lr=0.05), tiny).fit()
    evals = [h for h in r.history if "val_accuracy" in h]
    assert [h["epoch"] for h in evals] == [2, 4, 6]
    assert all("test_accuracy" in h for h in evals)
    # the final test is of the best-validation weights: the test accuracy measured then
    best = next(h for h in evals if h["epoch"] == r.best_epoch)
    assert best["test_accuracy"] == pytest.approx(r.test_accuracy)
    plain = Trainer(cfg(epochs=6, eval_every=2, lr=0.05), tiny).fit()
    assert not any("test_accuracy" in h for h in plain.history)
    assert plain.test_accuracy == pytest.approx(r.test_accuracy)  # nothing else changes


def test_trainer_records_the_data_dependent_defaults(tiny):
    """``normalize_features="auto"`` and ``min_steps`` are decided from the data at the start
    and the run records the decision (tiny's features are signed: kept as stored)."""
    c = TrainConfig.from_options(
        model="gcn", fanouts=(3, 3), hidden=8, batch_size=4, threads=1, progress=False, epochs=2
    )
    assert c.model.normalize_features == "auto"
    t = Trainer(c, tiny)
    assert t.config.model.normalize_features is False and t.config.optim.epochs == 2
    sage = TrainConfig.from_options(
        fanouts=(3, 3), hidden=8, batch_size=4, threads=1, progress=False, min_steps=6, eval_every=5
    )
    r = Trainer(sage, tiny).fit()  # 6 training nodes: 2 steps an epoch, 10 epochs = 20 steps
    assert r.config["optim"]["epochs"] == 10 and r.epochs == 10
    short = Trainer(TrainConfig.from_options(**{**sage.to_dict(), "min_steps": 40}), tiny)
    assert short.config.optim.epochs == 20


def test_batch_labels_come_from_memory_and_equal_the_label_file():
    from shoal.training.batches import BatchLoader

    labels = np.arange(100, dtype=np.int64) * 3
    seeds = np.array([40, 7, 99, 3], dtype=np.int64)
    ld = BatchLoader(None, None, labels, seeds, batch_size=2, seed=0)
    assert np.array_equal(ld.labels_of(np.array([99, 3, 40])), [297, 9, 120])
    assert np.array_equal(ld.labels_of(np.array([5, 99])), [15, 297])  # not all seeds
    assert ld.labels_of(np.empty(0, np.int64)).shape == (0,)


@pytest.mark.parametrize(("reads", "want"), [((100, 350), 250), ((-1, -1), -1), ((5, -1), -1)])
def test_the_final_evaluation_reports_the_bytes_it_read(tiny, monkeypatch, reads, want):
    """eval_read_bytes: the process's storage reads across the final evaluation (the
    /proc/self/io counter before and after), -1 where it cannot be read."""
    import shoal.training.loop as loop

    seq = iter(reads)
    tr = Trainer(cfg(epochs=1), tiny)
    monkeypatch.setattr(loop, "read_bytes_of_process", lambda: next(seq))
    r = tr.fit()
    assert r.eval_read_bytes == want and r.to_json()["eval_read_bytes"] == want


def test_eval_fanouts_sample_the_validation_during_training_and_keep_the_final_exact(
    tiny, monkeypatch
):
    """--eval-fanouts: the evaluations before the last epoch are sampled (the same draws each
    time), the last epoch's and the final one exact; with every neighbour (-1) the sampled
    accuracy is the exact one."""
    import shoal.training.tasks as tasks

    calls: list[tuple] = []
    real = tasks.sampled_evaluate

    def spy(model, data, splits, **kw):
        calls.append((splits, kw["fanouts"]))
        return real(model, data, splits, **kw)

    monkeypatch.setattr(tasks, "sampled_evaluate", spy)
    r = Trainer(cfg(epochs=4, eval_every=1, eval_fanouts=(2, 2), lr=0.05), tiny).fit()
    assert [h["evaluation"] for h in r.history] == ["sampled"] * 3 + ["exact"]
    assert calls == [(("val",), (2, 2))] * 3
    assert r.config["eval"]["fanouts"] == [2, 2]
    tr = Trainer(cfg(epochs=1, eval_fanouts=(-1, -1)), tiny)
    tr.fit()
    exact = tr.evaluate(("val", "test"))
    tr2 = Trainer(cfg(epochs=1, eval_fanouts=(-1, -1)), tiny)  # a trainer whose sampler lives
    tr2.model.load_state_dict(tr.model.state_dict())
    assert tr2.evaluate(("val", "test"), fanouts=(-1, -1)) == exact
    once = tr2.evaluate(("val",), fanouts=(1, 1))
    assert tr2.evaluate(("val",), fanouts=(1, 1)) == once  # fixed draws


def test_eval_fanouts_are_checked_against_the_layers_and_the_task():
    with pytest.raises(ValueError, match="one fanout per layer: 3 given for 2 layers"):
        cfg(eval_fanouts=(2, 2, 2))
    with pytest.raises(ValueError, match="link task"):
        TrainConfig.from_options(task="link", fanouts=(3, 3), eval_fanouts=(2, 2))
    c = cfg(eval_fanouts="5,all")
    assert c.eval.fanouts == (5, -1)
    assert TrainConfig.from_options(**c.flat()).eval.fanouts == (5, -1)
    assert cfg(eval_every="auto", eval_fanouts=(2, 2)).eval.every == "auto"
