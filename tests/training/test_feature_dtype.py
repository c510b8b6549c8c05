"""Compact feature dtypes end to end in one process: a graph imported as float16, bfloat16 or
int8 trains (the model in float32) exactly as the float32 graph of its decoded rows does; the
CLI pipeline (store build, verify) and refused dtypes."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.data.format import GraphDir
from shoal.errors import ShoalInputError
from shoal.training import TrainConfig, TrainData, Trainer, layerwise_inference
from shoal.utils.featdtype import FEATURE_DTYPES, decode, encode
from shoal.utils.io import read_json, write_json_atomic
from tests.engines.conftest import community_graph

CFG = dict(
    model="sage", fanouts=(3, 3), hidden=8, batch_size=16, epochs=3, lr=0.02, seed=3, threads=1
)


def _source(make_graph, n: int = 400, f: int = 32) -> GraphDir:
    """The community graph with ``f`` feature columns (its 4 and noise), float32."""
    g = community_graph(make_graph, n=n)
    x = np.asarray(g.features())
    noise = np.random.default_rng(2).normal(0, 1, (n, f - x.shape[1])).astype(np.float32)
    return make_graph_like(make_graph, g, np.hstack([x, noise]))


def _graph(make_graph, tmp_path, name: str, src: GraphDir | None = None) -> GraphDir:
    """``src`` (default :func:`_source`) with its features imported as ``name``."""
    from shoal.data.writer import GraphWriter

    g = src or _source(make_graph)
    out = tmp_path / f"g_{name}"
    with GraphWriter(out, num_nodes=g.num_nodes, feature_dtype=name) as w:
        for chunk in g.edge_stream():
            w.add_edges(chunk)
        w.finish_edges()
        w.write_features(np.asarray(g.features()))
        w.write_labels(np.asarray(g.labels()))
        for s in ("train", "val", "test"):
            w.write_split(s, np.asarray(g.split(s)))
    return GraphDir.open(out, verify=True)


def _fit(g: GraphDir, **kw) -> tuple[list[float], dict, Trainer]:
    tr = Trainer(TrainConfig.from_options(**CFG, progress=False, **kw), TrainData.from_graph_dir(g))
    losses = [tr.train_epoch(e)["loss"] for e in range(CFG["epochs"])]
    return losses, tr.evaluate(("val", "test")), tr


@pytest.mark.parametrize("name", FEATURE_DTYPES)
def test_each_dtype_trains_as_float32_on_its_decoded_rows(make_graph, tmp_path, monkeypatch, name):
    import shoal.training.trainer as trainer

    src = _source(make_graph)
    g = _graph(make_graph, tmp_path, name, src)
    x = np.asarray(src.features())
    stored = np.asarray(g.features())
    assert g.feature_dtype.name == name and stored.dtype == g.feature_dtype.stored
    rows, scales = encode(x, name)
    np.testing.assert_array_equal(stored, rows)
    if name == "int8":
        np.testing.assert_array_equal(np.load(g.path / "features.scales.npy"), scales)
    monkeypatch.setattr(trainer, "training_reserve", lambda *a, **kw: 1 << 20)
    losses, acc, tr = _fit(g)
    assert tr.budget.cache == tr.budget.features == stored.nbytes  # stored size, all cached
    # the model saw the decoded rows: the float32 run on the decoded matrix is the same run
    twin = make_graph_like(make_graph, g, decode(rows, name, scales))
    twin_losses, twin_acc, _ = _fit(twin)
    assert losses == pytest.approx(twin_losses, rel=1e-6)
    # exact evaluation (blocked layers read the rows by ranges) decodes them alike
    assert acc == twin_acc
    ids = np.arange(g.num_nodes)
    np.testing.assert_allclose(
        layerwise_inference(tr.model, tr.data, ids),
        layerwise_inference(tr.model, TrainData.from_graph_dir(twin), ids),
        rtol=1e-5,
        atol=1e-6,
    )
    assert 0.0 < acc["test"] <= 1.0  # (out of core: tests/engines/test_feature_dtype.py)


def make_graph_like(make_graph, g: GraphDir, x: np.ndarray) -> GraphDir:
    edges = np.concatenate(list(g.edge_stream()))
    return make_graph(
        edges,
        g.num_nodes,
        directed=True,
        x=x,
        y=np.asarray(g.labels()),
        train=np.asarray(g.split("train")),
        val=np.asarray(g.split("val")),
        test=np.asarray(g.split("test")),
    )


def test_an_unknown_feature_dtype_in_meta_is_refused(make_graph, tmp_path):
    g = _graph(make_graph, tmp_path, "float16")
    meta = read_json(g.path / "meta.json")
    meta["feature_dtype"] = "float8"
    write_json_atomic(g.path / "meta.json", meta)
    with pytest.raises(ShoalInputError, match="float8") as e:
        GraphDir.open(g.path)
    assert "int8" in str(e.value)


def test_the_cli_pipeline_with_int8_and_a_refused_dtype(make_graph, tmp_path, run_cli):
    g = community_graph(make_graph, n=80)
    code, _, err = run_cli(
        "partition", g.path, "--algo", "hash", "--parts", "2", "--out", tmp_path / "p"
    )
    assert code == 0, err
    build = ["store", "build", g.path, tmp_path / "p", "--halo-features", "--out"]
    code, _, err = run_cli(*build, tmp_path / "s", "--feature-dtype", "int8")
    assert code == 0, err
    for i in range(2):
        part = tmp_path / "s" / f"part_{i}"
        assert np.load(part / "features.npy").dtype == np.int8
        for f in ("features.scales.npy", "halo_features.scales.npy"):
            assert np.load(part / f).dtype == np.float32
    code, out, err = run_cli("verify", tmp_path / "s")
    assert code == 0 and "feature rows" in out, err
    with pytest.raises(SystemExit) as e:  # argparse's choices: exit 2, the valid ones named
        run_cli(*build, tmp_path / "t", "--feature-dtype", "fp8")
    assert e.value.code == 2 and not (tmp_path / "t").exists()


def test_an_empty_graph_is_refused_and_zero_rows_decode_to_zeros(tmp_path):
    from shoal.data.writer import GraphWriter
    from shoal.rows.gather import gather_rows

    for name in FEATURE_DTYPES:
        with pytest.raises(ShoalInputError, match="empty"):
            with GraphWriter(tmp_path / name, num_nodes=0, feature_dtype=name) as w:
                w.add_edges(np.empty((0, 2), np.int64))
                w.write_features(np.empty((0, 4), np.float32))
        assert not (tmp_path / name).exists()
        # isolated nodes whose rows are all zero (an int8 scale of 0)
        with GraphWriter(tmp_path / f"z{name}", num_nodes=3, feature_dtype=name) as w:
            w.add_edges(np.empty((0, 2), np.int64))
            w.finish_edges()
            w.write_features(np.zeros((3, 4), np.float32))
        g = GraphDir.open(tmp_path / f"z{name}", verify=True)
        got = gather_rows(g.features(), np.array([2, 0]))
        assert g.meta["feature_dtype"] == name and got.shape == (2, 4) and not got.any()
