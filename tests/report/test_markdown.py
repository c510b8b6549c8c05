"""report.md: the table of runs carries the runs' numbers; left-out plots are noted."""

from __future__ import annotations

from shoal.report.figures import Plot
from shoal.report.load import Run
from shoal.report.markdown import differing_settings, render_markdown, run_table
from tests.report.runs import run_result


def _row(lines: list[str], label: str) -> list[str]:
    (line,) = [x for x in lines if x.startswith(f"| {label} |")]
    return [c.strip() for c in line.strip("|").split("|")]


def test_table_has_the_runs_numbers():
    a = Run(label="a", data=run_result())
    b = Run(
        label="b",
        data=run_result(
            "minibatch",
            world_size=2,
            seconds=(3.0, 1.0, 2.0, 4.0),
            loss=(1, 1, 1, 1),
            val=(0.1, 0.8, 0.3, 0.2),
            store="/x/cora-4",
            best_epoch=2,
        ),
    )
    lines = run_table([a, b])
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    ra, rb = dict(zip(head, _row(lines, "a"))), dict(zip(head, _row(lines, "b")))
    assert ra["engine"] == "single" and ra["model"] == "gcn" and ra["data"] == "graph cora"
    assert ra["processes"] == "1" and ra["epochs"] == "3" and ra["metric"] == "accuracy"
    assert ra["best val (epoch)"] == "0.7000 (3)" and ra["test"] == "0.6500"
    assert ra["median epoch (s)"] == "1.500" and ra["total (s)"] == "5.0"
    assert rb["engine"] == "minibatch" and rb["processes"] == "2" and rb["data"] == "store cora-4"
    assert rb["best val (epoch)"] == "0.8000 (2)" and rb["epochs"] == "4"
    assert rb["median epoch (s)"] == "2.500" and rb["total (s)"] == "10.5"


def test_link_runs_show_mrr_and_missing_numbers_a_dash():
    d = run_result(metric="mrr")
    del d["test_mrr"]
    (row,) = run_table([Run(label="l", data=d)])[2:]
    assert "| MRR | 0.7000 (3) | – |" in row


def test_settings_that_differ():
    a = Run(label="a", data=run_result())
    b = Run(
        label="b",
        data=run_result(
            config={"model": "sage", "lr": 0.01, "hidden": 64, "memory_plan": {"total": 1}}
        ),
    )
    assert differing_settings([a, b]) == {"hidden": [16, 64]}  # model is in the table


def test_plots_linked_and_left_out_runs_noted():
    runs = [Run(label="a", data=run_result())]
    drawn = Plot(
        name="loss.png",
        title="Loss",
        caption="the loss",
        figure=object(),
        notes=["b: no `loss` in its epoch records"],
    )
    empty = Plot(name="cache.png", title="Cache hit rates", notes=["a: no cache hit rates"])
    text = render_markdown(runs, [drawn, empty], notes=["part sizes: no store"])
    assert "![Loss](loss.png)" in text and "the loss" in text
    assert "- not shown: b: no `loss` in its epoch records" in text
    assert "cache.png" in text and "![Cache" not in text and "a: no cache hit rates" in text
    assert "- part sizes: no store" in text
