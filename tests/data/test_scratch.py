"""Where the external sort puts its run files: never in the system temp dir (often RAM-backed);
in ``--scratch-dir`` when given, else beside the output; removed afterwards."""

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest

from shoal.data.format import GraphDir, GraphWriter

EDGES = "0 1\n1 2\n2 0\n0 1\n3 1\n1 2\n"  # (0, 1) and (1, 2) twice


@pytest.fixture
def sort_files(monkeypatch, tmp_path):
    """Spies on the sort: the folders made by ``tempfile.mkdtemp`` and the run files read back
    by the merge (``np.fromfile``); the system temp dir is pointed at an empty folder."""
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
    monkeypatch.setenv("TMPDIR", str(system_tmp))
    seen = {"dirs": [], "runs": [], "system_tmp": system_tmp}
    mkdtemp, fromfile = tempfile.mkdtemp, np.fromfile

    def spy_mkdtemp(*args, **kwargs):
        path = mkdtemp(*args, **kwargs)
        seen["dirs"].append(Path(path))
        return path

    def spy_fromfile(file, *args, **kwargs):
        if isinstance(file, str | Path) and Path(file).suffix == ".u64":
            seen["runs"].append(Path(file))
        return fromfile(file, *args, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", spy_mkdtemp)
    monkeypatch.setattr(np, "fromfile", spy_fromfile)
    return seen


def sort_dirs(seen) -> list[Path]:
    """The folders that held the sort's run files."""
    dirs = {p.parent for p in seen["runs"]}
    assert dirs, "the external sort wrote no run files"
    assert dirs <= set(seen["dirs"]), "run files outside a private temporary folder"
    return sorted(dirs)


def assert_clean(seen, where: Path) -> None:
    """Nothing in the system temp dir; every sort folder (and its owner file) removed."""
    assert list(seen["system_tmp"].iterdir()) == []
    assert not [p for p in where.rglob("*") if ".extsort" in p.name or p.suffix == ".u64"]
    for d in sort_dirs(seen):
        assert not d.exists()


def write_edges(tmp_path: Path) -> Path:
    src = tmp_path / "edges.txt"
    src.write_text(EDGES)
    return src


# ---------------------------------------------------------------- defaults: beside the output
def test_csr_default_scratch_is_the_graph_dir_not_system_tmp(sort_files, make_graph, run_cli):
    g = make_graph([[2, 0], [0, 1], [2, 1], [1, 0]], num_nodes=4)
    code, _, err = run_cli("data", "csr", g.path, "--memory", "1MB")
    assert code == 0, err
    assert [d.parent for d in sort_dirs(sort_files)] == [g.path, g.path]  # in, out
    assert_clean(sort_files, g.path.parent)
    assert g.csr("in", build=False).indices.tolist() == [1, 2, 0, 2]
    GraphDir.open(g.path, verify=True)


def test_import_dedup_default_scratch_is_beside_out(sort_files, run_cli, tmp_path):
    out = tmp_path / "graphs" / "g"
    code, _, err = run_cli("data", "import", write_edges(tmp_path), "--out", out, "--dedup")
    assert code == 0, err
    assert [d.parent for d in sort_dirs(sort_files)] == [out.parent]
    assert_clean(sort_files, tmp_path)
    assert GraphDir.open(out).num_edges == 4


def test_synth_dedup_default_scratch_is_beside_out(sort_files, run_cli, tmp_path):
    out = tmp_path / "r"
    code, _, err = run_cli(
        "data", "synth", "rmat", "--nodes", "64", "--edges", "500", "--dedup", "--out", out
    )
    assert code == 0, err
    assert [d.parent for d in sort_dirs(sort_files)] == [tmp_path]
    assert_clean(sort_files, tmp_path)


# ---------------------------------------------------------------- --scratch-dir
def test_csr_scratch_dir(sort_files, make_graph, run_cli, tmp_path):
    g = make_graph([[2, 0], [0, 1], [2, 1], [1, 0]], num_nodes=4)
    scratch = tmp_path / "scratch"
    code, _, err = run_cli("data", "csr", g.path, "--kind", "in", "--scratch-dir", scratch)
    assert code == 0, err
    assert [d.parent for d in sort_dirs(sort_files)] == [scratch]
    assert_clean(sort_files, tmp_path)
    assert list(scratch.iterdir()) == []
    assert g.csr("in", build=False).indptr.tolist() == [0, 2, 4, 4, 4]


def test_import_dedup_scratch_dir(sort_files, run_cli, tmp_path):
    src = write_edges(tmp_path)
    scratch = tmp_path / "scratch"
    code, _, err = run_cli(
        "data", "import", src, "--out", tmp_path / "a", "--dedup", "--scratch-dir", scratch
    )
    assert code == 0, err
    assert [d.parent for d in sort_dirs(sort_files)] == [scratch]
    assert_clean(sort_files, tmp_path)
    assert list(scratch.iterdir()) == []
    # where the scratch files went changes nothing in the output, nor in its provenance
    code, _, err = run_cli("data", "import", src, "--out", tmp_path / "b", "--dedup")
    assert code == 0, err
    a, b = GraphDir.open(tmp_path / "a"), GraphDir.open(tmp_path / "b")
    assert (a.path / "edges.bin").read_bytes() == (b.path / "edges.bin").read_bytes()
    assert a.edge_stream().memmap().tolist() == [[0, 1], [1, 2], [2, 0], [3, 1]]
    options = json.loads((a.path / "meta.json").read_text())["source"]["options"]
    assert "scratch_dir" not in options and options["dedup"] is True


def test_synth_scratch_dir(sort_files, run_cli, tmp_path):
    scratch = tmp_path / "scratch"
    args = ("--nodes", "50", "--edges", "300", "--classes", "2", "--features", "4", "--dedup")
    code, _, err = run_cli(
        "data", "synth", "dcsbm", *args, "--out", tmp_path / "s", "--scratch-dir", scratch
    )
    assert code == 0, err
    assert [d.parent for d in sort_dirs(sort_files)] == [scratch]
    assert_clean(sort_files, tmp_path)
    config = json.loads((tmp_path / "s" / "meta.json").read_text())["source"]["config"]
    assert "scratch_dir" not in config


def test_graph_writer_scratch_dir(sort_files, tmp_path):
    scratch = tmp_path / "scratch"
    with GraphWriter(tmp_path / "g", dedup=True, scratch_dir=scratch) as w:
        w.add_edges(np.array([[0, 1], [0, 1], [1, 0]]))
    assert [d.parent for d in sort_dirs(sort_files)] == [scratch]
    assert_clean(sort_files, tmp_path)
    assert GraphDir.open(tmp_path / "g").num_edges == 2


@pytest.mark.parametrize("flag", ["import", "csr", "rmat", "dcsbm"])
def test_scratch_dir_help_says_the_default(flag, capsys):
    from shoal.cli import main

    path = {"import": ["data", "import"], "csr": ["data", "csr"]}.get(flag, ["data", "synth", flag])
    with pytest.raises(SystemExit):
        main([*path, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--scratch-dir DIR" in text and "default: " in text and "never the system temp" in text
