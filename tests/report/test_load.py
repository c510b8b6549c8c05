"""Reading run results: known numbers, labels, and bad files named with a fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shoal.errors import ShoalInputError
from shoal.report import load_runs, load_store
from shoal.report.load import Run, unique_labels
from tests.report.runs import run_result, write_run


def test_run_numbers(tmp_path):
    (run,) = load_runs([write_run(tmp_path / "a.json", run_result())])
    assert run.label == "a" and run.engine == "single" and run.model == "gcn"
    assert run.median_epoch_seconds() == 1.5
    assert run.total_seconds() == pytest.approx(5.0)  # 4.5 s of epochs + 0.5 s of evaluation
    assert run.final("val") == 0.7 and run.final("test") == 0.65
    assert run.series("val_accuracy") == ([1, 2, 3], [0.5, 0.6, 0.7])
    assert run.dataset == "graph cora"


def test_link_runs_read_their_mrr():
    run = Run(label="l", data=run_result(metric="mrr"))
    assert run.metric == "mrr" and run.final("val") == 0.7 and run.final("test") == 0.65


def test_missing_numbers_are_none_not_errors():
    d = run_result()
    for r in d["history"]:
        del r["seconds"]
    d["seconds_per_epoch"] = None
    del d["eval_seconds"], d["val_accuracy"], d["config"]
    run = Run(label="x", data=d)
    assert run.median_epoch_seconds() is None and run.total_seconds() is None
    assert run.final("val") is None and run.model == "?"


def test_labels_tell_equal_stems_apart():
    assert unique_labels([Path("a/run.json"), Path("b/run.json")]) == ["a/run", "b/run"]
    assert unique_labels([Path("x.json"), Path("y.json")]) == ["x", "y"]
    assert unique_labels([Path("x.json"), Path("x.json")]) == ["x#1", "x#2"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "not found"),
        ("{not json", "not a JSON file"),
        ("[1, 2]", "not a run result"),
        (json.dumps({"engine": "single", "epochs": 1}), "no 'history'"),
        (json.dumps({"engine": "x", "epochs": 1, "history": {}}), "'history' is not a list"),
    ],
)
def test_bad_files_are_named_with_a_fix(tmp_path, content, message):
    p = tmp_path / "bad.json"
    if content is not None:
        p.write_text(content)
    with pytest.raises(ShoalInputError, match=message) as e:
        load_runs([p])
    assert str(p) in str(e.value) and "shoal train" in str(e.value)


def test_store_part_sizes(make_store):
    store = make_store(np.arange(48) % 3)
    parts = load_store(store)
    assert parts.num_parts == 3 and sum(parts.core) == 48
    assert all(0 < f < 1 for f in parts.halo_fraction())
    assert parts.halo_fraction()[0] == parts.halo[0] / (parts.core[0] + parts.halo[0])
