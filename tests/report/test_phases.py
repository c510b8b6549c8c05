"""The epoch time split: the stack adds up to the measured epoch; phases of a reading thread
(which overlap the epoch) are reported apart, not stacked."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from shoal.report import Run, write_report
from shoal.report.phases import (
    BACKGROUND_PHASES,
    OTHER,
    READ_AHEAD_PHASES,
    background_phases,
    epoch_bars,
)
from shoal.report.plots import plot_time_split
from tests.report.runs import run_result

PREFETCH = Path(__file__).resolve().parents[2] / "src/shoal/rows/prefetch.py"


def _read_ahead_run(seconds: tuple[float, ...] = (40.0, 28.0, 29.0)) -> dict:
    """A run reading ahead whose reading thread reads longer than each epoch (as the 10M-node
    run capped at 2 GiB of issue 31: a 28.5 s epoch drawn as a 57 s bar)."""
    d = run_result(seconds=seconds)
    for r in d["history"]:
        r["time_split"] = {
            "sampling": 3.0,
            "gather": 2.0,
            "io_wait": 9.0,
            "forward_backward": 12.0,
            "read": 2 * r["seconds"],
            "pack": 1.0,
        }
    return d


def test_background_read_longer_than_the_epoch_is_not_stacked():
    bars = epoch_bars(Run(label="ooc", data=_read_ahead_run()))
    assert bars is not None
    assert bars.epochs == "epochs 2-3"
    assert bars.epoch_seconds == pytest.approx(28.5)
    assert bars.stacked_seconds == pytest.approx(28.5)  # the stack is the measured epoch
    assert set(bars.stacked) == {"gather", "io_wait", "forward_backward", OTHER}
    assert bars.stacked[OTHER] == pytest.approx(28.5 - 2.0 - 9.0 - 12.0)
    # the reading thread's phases, apart: its sampling, reads (57 s: longer than the epoch)
    assert bars.background == pytest.approx({"sampling": 3.0, "read": 57.0, "pack": 1.0})
    assert list(bars.background) == ["sampling", "read", "pack"]


def test_without_reading_ahead_every_phase_is_stacked_up_to_the_epoch():
    bars = epoch_bars(Run(label="mem", data=run_result(seconds=(2.0, 1.0, 3.0))))
    assert bars is not None and bars.background == {}
    # sampling is the training thread's here; the phases cover the whole epoch: no 'other'
    assert list(bars.stacked) == ["sampling", "gather", "forward_backward"]
    assert bars.stacked_seconds == pytest.approx(2.0) == bars.epoch_seconds


def test_phases_exceeding_the_epoch_get_no_other_and_no_epoch_is_no_other():
    d = run_result(seconds=(1.0, 1.0), loss=(1.0, 0.9), val=(0.5, 0.6))
    for r in d["history"]:
        r["time_split"]["forward_backward"] = 5.0
    bars = epoch_bars(Run(label="over", data=d))
    assert bars is not None and OTHER not in bars.stacked
    assert bars.stacked_seconds == pytest.approx(5.5)
    for r in d["history"]:
        del r["seconds"]
    bars = epoch_bars(Run(label="no-seconds", data=d))
    assert bars is not None and bars.epoch_seconds is None and OTHER not in bars.stacked


def test_the_results_mean_split_when_records_have_none():
    d = _read_ahead_run()
    for r in d["history"]:
        del r["time_split"]
    d["time_split"] = {"io_wait": 9.0, "forward_backward": 12.0, "read": 40.0, "sampling": 3.0}
    d["seconds_per_epoch"] = 30.0
    bars = epoch_bars(Run(label="mean", data=d))
    assert bars is not None and bars.epochs == "all epochs (the result's mean)"
    assert bars.stacked_seconds == pytest.approx(30.0)
    assert bars.background == pytest.approx({"sampling": 3.0, "read": 40.0})
    del d["time_split"]
    assert epoch_bars(Run(label="none", data=d)) is None


def test_background_phases_need_a_reading_thread():
    assert background_phases({"sampling": 1.0, "gather": 1.0}) == frozenset()
    assert background_phases({"sampling": 1.0, "read": 0.0}) == {"sampling", "read"}
    assert background_phases({"pack": 1.0, "gather": 1.0}) == {"pack"}


def test_every_phase_the_prefetcher_times_is_classified():
    """A phase added to the prefetcher's timer must be named a background phase (its reading
    thread's) or be one of the training thread's waits: otherwise the report stacks it."""
    tree = ast.parse(PREFETCH.read_text())
    timed = {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "add"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    assert timed, "no timer.add(...) found in prefetch.py"
    training_thread = {"io_wait", "gather"}  # in _consume, on the training thread
    # "sampling": batches read back from the spool, on the reading thread, like sampling ahead
    assert timed - training_thread <= set(BACKGROUND_PHASES) | set(READ_AHEAD_PHASES)
    assert set(BACKGROUND_PHASES) <= timed
    # the reading thread samples through the loader (BatchLoader.samples times "sampling")
    assert re.search(r"loader\.samples\(", PREFETCH.read_text())
    assert READ_AHEAD_PHASES == ("sampling",)


def test_the_figure_draws_the_reading_thread_apart(tmp_path):
    pytest.importorskip("matplotlib", reason="shoal report draws with matplotlib")
    runs = [Run(label="ooc", data=_read_ahead_run()), Run(label="mem", data=run_result())]
    secs = plot_time_split(runs).figure.axes[0]
    heights: dict[tuple[float, bool], float] = {}  # (bar centre, hatched) -> stacked height
    for bar in secs.patches:
        key = (round(bar.get_x() + bar.get_width() / 2, 2), bool(bar.get_hatch()))
        heights[key] = heights.get(key, 0.0) + bar.get_height()
    assert heights[(-0.12, False)] == pytest.approx(28.5)  # ooc: its epoch
    assert heights[(0.27, True)] == pytest.approx(61.0)  # beside it: sampling + read + pack
    assert heights[(0.88, False)] == pytest.approx(1.25)  # mem: its epoch
    assert heights[(1.27, True)] == 0.0
    summary = write_report(runs, tmp_path / "rep")
    split = next(f for f in summary["figures"] if f["title"] == "Epoch time split")
    assert split["file"] and split["notes"] == []
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "adds up to the measured epoch" in text and "reading thread" in text
