"""``shoal partition``: outputs, JSON keys, exit codes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shoal.partition.io import read_assignment

KEYS = tuple(
    (
        "algorithm num_parts num_nodes num_edges replication_factor edge_cut node_balance "
        "edge_balance train_balance seconds peak_rss_bytes"
    ).split()
)


def _graph(make_graph):
    rng = np.random.default_rng(0)
    e = rng.integers(0, 40, (120, 2))
    return make_graph(np.concatenate([e, e[:, ::-1]]), 40, directed=False, train=range(10))


def test_default_configuration_writes_assignment(make_graph, run_cli, tmp_path):
    g = _graph(make_graph)
    out, js = tmp_path / "parts", tmp_path / "m.json"
    code, stdout, _ = run_cli("partition", g.path, "--parts", 3, "--out", out, "--json", js)
    assert code == 0
    assert "edge cut" in stdout and "replication factor" in stdout
    m = json.loads(js.read_text())
    for k in KEYS:
        assert k in m, k
    assert m["algorithm"] == "grem" and m["refine_passes"] == 4
    assert json.loads((out / "meta.json").read_text())["params"]["window_per_node"] == 1.0
    a, meta = read_assignment(out)
    assert a.num_parts == 3 and a.node_part.shape == (40,)
    assert meta["metrics"]["edge_cut"] == m["edge_cut"]
    assert np.bincount(a.node_part, minlength=3).sum() == 40


def test_vertex_cut_and_json_stdout(make_graph, run_cli, tmp_path):
    g = _graph(make_graph)
    out = tmp_path / "p"
    code, stdout, _ = run_cli(
        "partition", g.path, "--algo", "hdrf", "--parts", 2, "--out", out, "--json", "-"
    )
    assert code == 0
    m = json.loads(stdout)
    assert m["refine_passes"] == 0 and "vertex_cut_rf" in m
    a, _ = read_assignment(out)
    assert a.edge_part is not None and a.edge_part.shape == (g.num_edges,)


def test_options_and_seed(make_graph, run_cli, tmp_path):
    g = _graph(make_graph)
    args = ["partition", g.path, "--algo", "grem", "--parts", 4, "--option", "window=50"]
    code, _, _ = run_cli(*args, "--option", "refine=false", "--out", tmp_path / "a")
    assert code == 0
    code, _, _ = run_cli(*args, "--option", "refine=false", "--out", tmp_path / "b")
    a, meta = read_assignment(tmp_path / "a")
    b, _ = read_assignment(tmp_path / "b")
    assert np.array_equal(a.node_part, b.node_part)
    assert meta["params"]["refine"] is False and meta["params"]["window"] == 50


def test_exit_codes(make_graph, run_cli, tmp_path):
    g = _graph(make_graph)
    code, _, err = run_cli("partition", g.path, "--algo", "nope", "--parts", 2)
    assert code == 2 and "valid names" in err and "spring" in err
    code, _, err = run_cli("partition", g.path, "--parts", 41)
    assert code == 2 and "larger than the number of nodes" in err
    code, _, err = run_cli("partition", g.path, "--parts", 2, "--option", "bogus=1")
    assert code == 2 and "window" in err
    code, _, err = run_cli("partition", tmp_path / "missing", "--parts", 2)
    assert code == 2
    out = tmp_path / "o"
    assert run_cli("partition", g.path, "--algo", "hash", "--parts", 2, "--out", out)[0] == 0
    code, _, err = run_cli("partition", g.path, "--algo", "hash", "--parts", 2, "--out", out)
    assert code == 2 and "overwrite" in err
    assert (
        run_cli("partition", g.path, "--algo", "hash", "--parts", 2, "--out", out, "--overwrite")[0]
        == 0
    )


# ------------------------------------------------------------------------------ scratch space
@pytest.fixture
def scratch_dirs(tmp_path, monkeypatch):
    """The scratch directories the vertex-cut edge->part files are made in; the system temp
    dir points at a directory that does not exist (a file made there fails the run)."""
    import contextlib
    import tempfile

    import shoal.partition._streaming as streaming

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "system-tmp"))
    seen: list = []
    real = streaming.scratch_space

    @contextlib.contextmanager
    def spy(*args, **kwargs):
        with real(*args, **kwargs) as d:
            seen.append(d)
            yield d

    monkeypatch.setattr(streaming, "scratch_space", spy)
    return seen


def test_scratch_dir_option(make_graph, run_cli, tmp_path, scratch_dirs):
    g = _graph(make_graph)
    out, scratch = tmp_path / "parts" / "o", tmp_path / "scratch"
    code, _, err = run_cli(
        "partition", g.path, "--algo", "hdrf", "--parts", 2, "--out", out, "--scratch-dir", scratch
    )
    assert code == 0, err
    assert scratch_dirs and all(d.parent == scratch for d in scratch_dirs)
    assert list(scratch.iterdir()) == []
    assert sorted(p.name for p in out.parent.iterdir()) == ["o"]
    assert not (tmp_path / "system-tmp").exists()
    assert json.loads((out / "meta.json").read_text())["params"]["scratch_dir"] == str(scratch)


def test_scratch_defaults_to_beside_the_output(make_graph, run_cli, tmp_path, scratch_dirs):
    g = _graph(make_graph)
    out = tmp_path / "parts" / "o"
    code, _, err = run_cli("partition", g.path, "--algo", "dbh", "--parts", 2, "--out", out)
    assert code == 0, err
    assert scratch_dirs and all(d.parent == out.parent.resolve() for d in scratch_dirs)
    assert sorted(p.name for p in out.parent.iterdir()) == ["o"]
    assert not (tmp_path / "system-tmp").exists()


def test_scratch_dir_is_not_an_algorithm_option(make_graph, run_cli, tmp_path, capsys):
    g = _graph(make_graph)
    code, _, err = run_cli(
        "partition", g.path, "--algo", "hdrf", "--parts", 2, "--option", f"scratch_dir={tmp_path}"
    )
    assert code == 2 and "scratch_dir" in err
    from shoal.cli import main

    with pytest.raises(SystemExit):
        main(["partition", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--scratch-dir DIR" in text and "default: the directory that will hold --out" in text
