"""Large temporary files of the partitioners (the edge->part file of vertex-cut algorithms,
KaMinPar's graph file) go to ``scratch_dir``, else beside the graph directory: never to the
system temp dir, which is often RAM-backed."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import numpy as np
import pytest

import shoal.partition._streaming as streaming
import shoal.partition.kaminpar as kaminpar_mod
from shoal.partition.base import available, get_partitioner
from shoal.partition.run import run_partition

VERTEX_CUT = ["hdrf", "dbh", "greedy", "2ps-l"]


def _graph(make_graph):
    rng = np.random.default_rng(0)
    e = rng.integers(0, 60, (300, 2))
    return make_graph(np.concatenate([e, e[:, ::-1]]), 60, directed=False)


@pytest.fixture
def no_system_tmp(tmp_path, monkeypatch):
    """Point the system temp dir at a directory that does not exist: a temporary file made
    there fails the run, even one removed before the run ends."""
    d = tmp_path / "system-tmp"
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


@pytest.fixture
def scratch_spy(monkeypatch):
    """Record every scratch directory the partitioners open and the work files made in it."""
    seen: dict[str, list[Path]] = {"dirs": [], "files": []}

    def spy(real):
        @contextlib.contextmanager
        def scratch_space(*args, **kwargs):
            with real(*args, **kwargs) as d:
                seen["dirs"].append(d)
                yield d

        return scratch_space

    monkeypatch.setattr(streaming, "scratch_space", spy(streaming.scratch_space))
    monkeypatch.setattr(kaminpar_mod, "scratch_space", spy(kaminpar_mod.scratch_space))
    real_write = streaming._EdgePartFile.write

    def write(self, parts):
        assert Path(self.path).is_file()
        seen["files"].append(Path(self.path))
        return real_write(self, parts)

    real_metis = kaminpar_mod._write_metis

    def write_metis(path, indptr, indices):
        real_metis(path, indptr, indices)
        assert Path(path).is_file()
        seen["files"].append(Path(path))

    monkeypatch.setattr(streaming._EdgePartFile, "write", write)
    monkeypatch.setattr(kaminpar_mod, "_write_metis", write_metis)
    return seen


def _algos():
    return [*VERTEX_CUT, "kaminpar"]


@pytest.mark.parametrize("algo", _algos())
def test_default_scratch_is_beside_the_graph(make_graph, no_system_tmp, scratch_spy, algo):
    if algo not in available():
        pytest.skip(f"{algo} not installed")
    g = _graph(make_graph)
    a = get_partitioner(algo, num_parts=3).partition(g)
    assert a.node_part.shape == (60,)
    assert not no_system_tmp.exists()
    assert scratch_spy["dirs"] and scratch_spy["files"]
    for d in scratch_spy["dirs"]:
        assert d.parent == g.path.resolve().parent
        assert d.name.startswith(".shoal-") and ".tmp-" in d.name
        assert not d.exists()
    for f in scratch_spy["files"]:
        assert f.parent in scratch_spy["dirs"] and not f.exists()
    assert not [p.name for p in g.path.parent.iterdir() if "scratch" in p.name]


@pytest.mark.parametrize("algo", _algos())
def test_scratch_dir_is_used_and_left_empty(make_graph, tmp_path, no_system_tmp, scratch_spy, algo):
    if algo not in available():
        pytest.skip(f"{algo} not installed")
    g = _graph(make_graph)
    scratch = tmp_path / "scratch"
    r = run_partition(g, algo, num_parts=3, scratch_dir=scratch)
    assert r.assignment.params["scratch_dir"] == str(scratch)
    assert not no_system_tmp.exists()
    assert scratch_spy["dirs"] and scratch_spy["files"]
    for d in scratch_spy["dirs"]:
        assert d.parent == scratch
    for f in scratch_spy["files"]:
        assert f.parent.parent == scratch
    assert list(scratch.iterdir()) == []
    # the edge->part map stays readable after its file and directory are gone
    if algo != "kaminpar":
        assert np.asarray(r.assignment.edge_part).shape == (g.num_edges,)


def test_edge_part_file_cleans_up_on_error(make_graph, tmp_path):
    g = _graph(make_graph)
    scratch = tmp_path / "scratch"

    def boom(src, dst, out):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        streaming._assign_edges(g, 2, 64, "test", boom, scratch_dir=scratch)
    assert list(scratch.iterdir()) == []
