"""shoal report and shoal train --report: reports of real runs; bad input exits 2."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from shoal.data.importers import import_graph
from tests.report.runs import png_size, run_result, write_run

CORA = Path(__file__).resolve().parents[2] / "src/shoal/data/datasets/cora/graph.npz"
FIGURES = {"loss.png", "validation.png", "time_split.png", "bytes.png", "cache.png"}

needs_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="shoal report draws with matplotlib (shoal[report])",
)


@needs_matplotlib
def test_report_of_two_runs(tmp_path, run_cli):
    a = write_run(tmp_path / "a.json", run_result())
    b = write_run(tmp_path / "b.json", run_result("minibatch", world_size=2, comm=True))
    code, out, err = run_cli("report", a, b, "--out", tmp_path / "rep", "--json", "-")
    assert code == 0, err
    summary = json.loads(out)
    assert [r["label"] for r in summary["runs"]] == ["a", "b"]
    assert {Path(f["file"]).name for f in summary["figures"] if f["file"]} == FIGURES
    assert "| b | minibatch | gcn |" in (tmp_path / "rep" / "report.md").read_text()


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "not found"), ("{oops", "not a JSON file"), ('{"a": 1}', "not a run result")],
)
def test_bad_input_exits_2_naming_the_file(tmp_path, run_cli, content, message):
    p = tmp_path / "run.json"
    if content is not None:
        p.write_text(content)
    good = write_run(tmp_path / "good.json", run_result())
    code, _, err = run_cli("report", good, p, "--out", tmp_path / "rep")
    assert code == 2 and str(p) in err and message in err and "--json FILE" in err
    assert not (tmp_path / "rep").exists()


def test_without_matplotlib_exit_2_says_what_to_install(tmp_path, run_cli, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    good = write_run(tmp_path / "good.json", run_result())
    code, _, err = run_cli("report", good, "--out", tmp_path / "rep")
    assert code == 2 and "matplotlib" in err and "shoal[report]" in err
    with pytest.raises(SystemExit) as e:  # shoal train refuses before training
        run_cli("train", "--graph", tmp_path, "--report", tmp_path / "rep")
    assert e.value.code == 2


@needs_matplotlib
def test_train_report_single_process_on_cora(tmp_path, run_cli):
    g = import_graph(CORA, tmp_path / "cora")
    opts = "--model gcn --fanouts all,all --hidden 16 --epochs 2 --threads 1 --no-progress"
    code, _, err = run_cli("train", "--graph", g.path, *opts.split(), "--report", tmp_path / "rep")
    assert code == 0, err
    rep = tmp_path / "rep"
    assert "report of the run" in err
    result = json.loads((rep / "run.json").read_text())  # no --json: kept beside the report
    assert result["epochs"] == 2
    for name in FIGURES - {"bytes.png"}:
        assert png_size(rep / name)[0] > 600
    text = (rep / "report.md").read_text()
    assert "`bytes.png`): not drawn (every run moved 0 bytes" in text  # all in memory
    assert "| single | single | gcn | graph cora | 1 | 1 | 2 | accuracy |" in text


@needs_matplotlib
def test_train_report_with_an_engine(tmp_path, run_cli, make_store):
    store = make_store(parts=2)
    opts = "--engine minibatch --nproc 1 --fanouts 3,3 --hidden 8 --epochs 2 --threads 1".split()
    out = ["--no-progress", "--json", tmp_path / "mb.json", "--report", tmp_path / "rep"]
    code, _, err = run_cli("train", "--store", store, *opts, *out)
    assert code == 0, err
    rep = tmp_path / "rep"
    assert not (rep / "run.json").exists()  # the run's JSON is --json's file
    assert png_size(rep / "store.png")[0] > 600  # the store the run recorded
    assert "| mb | minibatch |" in (rep / "report.md").read_text()
