"""Writing a report: every figure a valid PNG, runs lacking fields left out with a note."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.report import ReportConfig, Run, write_report
from tests.report.runs import png_size, run_result

pytest.importorskip("matplotlib", reason="shoal report draws with matplotlib (shoal[report])")

ALL = {"loss.png", "validation.png", "time_split.png", "bytes.png", "cache.png"}


def _files(summary: dict) -> dict[str, str]:
    return {f["title"]: f["file"] for f in summary["figures"]}


def test_every_figure_is_a_png(tmp_path, make_store):
    store = make_store(np.arange(48) % 3)
    runs = [
        Run(label="single", data=run_result()),
        Run(label="mb", data=run_result("minibatch", world_size=2, comm=True, store=str(store))),
    ]
    summary = write_report(runs, tmp_path / "rep")
    names = {p.name for p in (tmp_path / "rep").iterdir()}
    assert names == ALL | {"store.png", "report.md"}
    for name in names - {"report.md"}:
        w, h = png_size(tmp_path / "rep" / name)
        assert w >= 600 and h >= 400, name
        assert (tmp_path / "rep" / name).stat().st_size > 15_000, name
    text = (tmp_path / "rep" / "report.md").read_text()
    for name in names - {"report.md"}:
        assert f"]({name})" in text
    assert summary["notes"] == [] and "| mb | minibatch |" in text


def test_runs_lacking_fields_are_left_out_with_a_note(tmp_path):
    bare = run_result(io=False)
    for r in bare["history"]:
        del r["loss"], r["time_split"]
    runs = [Run(label="full", data=run_result(comm=True)), Run(label="bare", data=bare)]
    summary = write_report(runs, tmp_path / "rep")
    notes = {f["title"]: f["notes"] for f in summary["figures"]}
    assert notes["Training loss per epoch"] == ["bare: no `loss` in its epoch records"]
    assert notes["Epoch time split"] == ["bare: no `time_split` in its epoch records"]
    assert notes["Cache hit rates"] == ["bare: no cache hit rates in its epoch records"]
    assert notes["Validation metric per epoch"] == []
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "- not shown: bare: no `loss` in its epoch records" in text
    assert "no run recorded a store" in text  # single-process runs: no part sizes


def test_a_figure_no_run_can_fill_is_not_drawn(tmp_path):
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "cache.png").write_bytes(b"old")  # an earlier report's
    d = run_result(io=False)
    summary = write_report([Run(label="a", data=d)], tmp_path / "rep")
    files = _files(summary)
    assert files["Cache hit rates"] is None and files["Bytes per epoch"] is None
    assert not (tmp_path / "rep" / "cache.png").exists()
    assert files["Training loss per epoch"] is not None
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "**Cache hit rates** (`cache.png`): not drawn" in text


def test_a_store_that_is_gone_is_a_note_and_a_bad_store_option_an_error(tmp_path):
    from shoal.errors import ShoalInputError

    runs = [Run(label="a", data=run_result(store=str(tmp_path / "gone")))]
    summary = write_report(runs, tmp_path / "rep")
    assert "store" not in {p.stem for p in (tmp_path / "rep").iterdir()}
    assert "not readable" in summary["notes"][0] and "--store" in summary["notes"][0]
    with pytest.raises(ShoalInputError, match="store"):
        write_report(runs, tmp_path / "rep", ReportConfig(store=tmp_path / "gone"))
