"""shoal embed: every node's output of a checkpointed run equals the exact inference."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from shoal.data.importers import import_graph
from shoal.data.linksplit import EdgeSplitConfig, split_edges
from shoal.training import TrainConfig, TrainData, Trainer, layerwise_inference
from shoal.training.link_config import LinkConfig
from shoal.training.linkdata import LinkData
from tests.training.test_linktask import LinkTrainer

CORA = Path(__file__).resolve().parents[2] / "src/shoal/data/datasets/cora/graph.npz"


def test_embed_node_logits_and_link_embeddings(tmp_path, run_cli):
    g = import_graph(CORA, tmp_path / "cora")
    cfg = dict(
        model="sage",
        fanouts=(5, 5),
        batch_size=256,
        hidden=16,
        epochs=2,
        lr=0.01,
        threads=1,
        progress=False,
    )
    tr = Trainer(
        TrainConfig.from_options(**cfg, checkpoint_dir=str(tmp_path / "ck")),
        TrainData.from_graph_dir(g),
    )
    tr.fit()  # leaves the best-validation weights in tr.model
    embed = ["embed", "--graph", g.path, "--checkpoint-dir", tmp_path / "ck", "--out"]
    code, out, err = run_cli(*embed, tmp_path / "logits.npy")
    assert code == 0, err
    got = np.load(tmp_path / "logits.npy")
    want = layerwise_inference(tr.model, tr.data, np.arange(g.num_nodes))
    assert got.shape == (g.num_nodes, 7) and np.allclose(got, want, atol=1e-5)
    code, _, err = run_cli(*embed, tmp_path / "cls.npy", "--predict")
    assert code == 0 and np.array_equal(np.load(tmp_path / "cls.npy"), want.argmax(1))

    s = split_edges(g, tmp_path / "link", EdgeSplitConfig())
    lt = LinkTrainer(
        TrainConfig.from_options(**cfg, task="link", checkpoint_dir=str(tmp_path / "lk")),
        LinkConfig(scorer="mlp", eval_negatives=10),
        LinkData.from_graph_dir(s),
    )
    lt.fit()
    embed = ["embed", "--graph", s.path, "--checkpoint-dir", tmp_path / "lk", "--out"]
    code, _, err = run_cli(*embed, tmp_path / "emb.npy")
    assert code == 0, err
    with torch.no_grad():
        want = layerwise_inference(lt.model, lt.data, np.arange(s.num_nodes))
    assert np.allclose(np.load(tmp_path / "emb.npy"), want, atol=1e-5)
    assert not list(tmp_path.glob(".emb.npy.tmp*"))
    code, _, err = run_cli(
        "embed", "--graph", g.path, "--checkpoint-dir", tmp_path, "--out", tmp_path / "x.npy"
    )
    assert code == 2 and "--checkpoint-dir" in err


@pytest.mark.parametrize("tables", ["model", "disk"])
def test_embed_a_typed_graph_per_node_type(tmp_path, tables):
    """R-GCN run with checkpoints, then ``shoal embed``: the target type's logits in its
    own id order, whose classes give the run's test accuracy (best weights, exact; with
    the featureless type's table on disk, the table as it was at the best epoch)."""
    import json

    from shoal.cli import main
    from shoal.data.format import GraphDir
    from shoal.data.synth.igbh import IGBHConfig, generate_igbh

    cfg = IGBHConfig(scale=0.01, features=8, classes=3, seed=2, featureless=("conference",))
    g = generate_igbh(tmp_path / "g", cfg, show_progress=False)
    ck, res = tmp_path / "ck", tmp_path / "r.json"
    opts = ["--model", "rgcn", "--fanouts", "4,4", "--epochs", "3", "--hidden", "8"]
    if tables == "disk":
        opts += ["--type-embeddings", "disk", "--embedding-dir", str(tmp_path / "emb")]
    args = ["train", "--graph", str(g.path), *opts, "--eval-every", "1"]
    assert main([*args, "--checkpoint-dir", str(ck), "--json", str(res)]) == 0
    r = json.loads(res.read_text())
    s = GraphDir.open(g.path).schema
    paper = s.node_type("paper")
    out = tmp_path / "paper.npy"
    base = ["embed", "--graph", str(g.path), "--checkpoint-dir", str(ck)]
    assert main([*base, "--out", str(out)]) == 0
    x = np.load(out)
    assert x.shape == (paper.count, 3) and np.isfinite(x).all()
    assert main([*base, "--out", str(tmp_path / "cls.npy"), "--predict"]) == 0
    cls = np.load(tmp_path / "cls.npy")
    assert np.array_equal(cls, x.argmax(1))
    test = np.asarray(g.split("test")) - paper.offset
    labels = np.asarray(g.labels())[paper.offset :][: paper.count]
    assert np.mean(cls[test] == labels[test]) == pytest.approx(r["test_accuracy"], abs=1e-9)
    # another type: its own rows, in its own order
    assert main([*base, "--out", str(tmp_path / "a.npy"), "--node-type", "author"]) == 0
    assert np.load(tmp_path / "a.npy").shape == (s.node_type("author").count, 3)
    assert main([*base, "--out", str(tmp_path / "b.npy"), "--node-type", "venue"]) == 2
    if tables == "disk":  # the last checkpoint's tables with the last weights; no copy: refused
        assert main([*base, "--out", str(tmp_path / "l.npy"), "--which", "last"]) == 0
        assert np.load(tmp_path / "l.npy").shape == (paper.count, 3)
        shutil.rmtree(ck / "embedding_conference_best")
        assert main([*base, "--out", str(tmp_path / "c.npy")]) == 2
