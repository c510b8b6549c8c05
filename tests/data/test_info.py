"""``shoal data info`` / ``shoal data csr`` and the statistics behind them."""

import json
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.data import extsort
from shoal.data.extsort import build_csr_files
from shoal.data.info import degree_stats, graph_info, power_law_indicators
from shoal.data.stream import EdgeStream


def test_info_tiny_graph(make_graph):
    # 0->1, 0->2, 1->2, 2->2 (self-loop); node 3 isolated
    g = make_graph(
        [[0, 1], [0, 2], [1, 2], [2, 2]],
        num_nodes=4,
        x=np.ones((4, 2)),
        y=[0, 1, 1, -1],
        train=[0],
        val=[1],
        test=[2, 3],
    )
    info = graph_info(g)
    assert info["num_nodes"] == 4 and info["num_edges"] == 4 and info["directed"]
    assert info["self_loops"] == 1 and info["isolated_nodes"] == 1
    assert info["out_degree"]["max"] == 2 and info["in_degree"]["max"] == 3
    assert info["degree"]["max"] == 4  # node 2: out 1 + in 3
    assert info["features"]["shape"] == [4, 2]
    assert info["labels"] == {"num_classes": 2, "class_counts": [1, 2], "unlabelled": 1}
    assert info["splits"] == {"train": 1, "val": 1, "test": 2}
    assert info["split_class_counts"]["test"] == [0, 1]


def test_degree_stats_known_values():
    s = degree_stats(np.array([0, 1, 2, 3, 4]))
    assert (s["min"], s["max"], s["mean"], s["median"], s["zero"]) == (0, 4, 2.0, 2.0, 1)
    assert s["percentiles"]["p50"] == 2.0


def test_power_law_indicators():
    rng = np.random.default_rng(0)
    # discrete power law with exponent 2.5 (inverse transform of the continuous one)
    d = np.floor((1 - rng.random(200_000)) ** (-1 / 1.5) * 3).astype(np.int64)
    pl = power_law_indicators(d)
    assert 2.0 < pl["alpha_mle"] < 3.0 and pl["power_law_like"]
    assert -2.0 < pl["ccdf_loglog_slope"] < -1.0
    poisson = rng.poisson(20, 200_000)
    pl = power_law_indicators(poisson)
    assert not pl["power_law_like"] and pl["max_to_mean"] < 3
    assert power_law_indicators(np.zeros(5, np.int64))["alpha_mle"] is None


def test_info_cli_text_and_json(make_graph, run_cli, tmp_path):
    g = make_graph([[0, 1], [1, 0]], x=np.eye(2), y=[0, 1], train=[0], test=[1])
    code, out, err = run_cli("data", "info", g.path)
    assert code == 0, err
    assert "nodes      2" in out and "splits     train 1  test 1" in out
    code, out, _ = run_cli("data", "info", g.path, "--json")
    assert json.loads(out)["num_edges"] == 2
    code, out, _ = run_cli("data", "info", g.path, "--json", tmp_path / "i.json", "--verify")
    assert code == 0 and json.loads((tmp_path / "i.json").read_text())["num_nodes"] == 2
    code, _, err = run_cli("data", "info", tmp_path / "nope")
    assert code == 2 and "nope" in err


def test_csr_cli(make_graph, run_cli, tmp_path):
    e = np.array([[2, 0], [0, 1], [2, 1], [1, 0]])
    g = make_graph(e, num_nodes=4)
    code, out, err = run_cli(
        "data", "csr", g.path, "--kind", "both", "--memory", "1MB", "--json", tmp_path / "c.json"
    )
    assert code == 0, err
    assert g.csr("in", build=False).indptr.tolist() == [0, 2, 4, 4, 4]
    assert g.csr("in", build=False).indices.tolist() == [1, 2, 0, 2]
    assert g.csr("out", build=False).indices.tolist() == [1, 0, 0, 1]
    assert set(json.loads((tmp_path / "c.json").read_text())["views"]) == {"in", "out"}
    g.verify()


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 40),
    m=st.integers(0, 6000),
    seed=st.integers(0, 2**16),
    run_edges=st.sampled_from([1024, 1500, 5000]),
)
def test_csr_equals_lexsort(tmp_path_factory, n, m, seed, run_edges):
    """External-sort CSR views equal an in-memory lexsort, for any run size."""
    rng = np.random.default_rng(seed)
    e = rng.integers(0, n, size=(m, 2)).astype(np.int32)
    d = tmp_path_factory.mktemp("csr")
    (d / "edges.bin").write_bytes(e.tobytes())
    stream = EdgeStream(d / "edges.bin", m, np.int32, chunk_edges=7)
    for kind, (p, s) in {"in": (1, 0), "out": (0, 1)}.items():
        out = d / kind
        # memory cap so small that runs hold run_edges edges: several runs get merged
        with (
            mock.patch.object(extsort, "_MIN_MEMORY", 0),
            mock.patch.object(extsort, "_SINK_SLICE", 13),
        ):
            build_csr_files(stream, n, out, kind=kind, memory_bytes=run_edges * 40)
        indptr = np.load(out / "indptr.npy")
        indices = np.load(out / "indices.npy")
        order = np.lexsort((e[:, s], e[:, p]))
        assert np.array_equal(indices, e[order, s])
        assert np.array_equal(indptr, np.r_[0, np.cumsum(np.bincount(e[:, p], minlength=n))])
