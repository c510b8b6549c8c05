"""``report.md``: a table of the runs, the figures with their captions, and notes for what was
left out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from shoal.report.figures import Plot
from shoal.report.load import Run
from shoal.report.plots import METRIC_NAMES

__all__ = ["differing_settings", "fmt", "render_markdown", "run_table"]

#: Settings never listed as differing: in the table already, or saying nothing of the method.
QUIET_SETTINGS = frozenset(
    {
        "engine",
        "nproc",
        "epochs",
        "model",
        "progress",
        "metrics_file",
        "checkpoint_dir",
        "scratch_dir",
        "resume",
    }
)


def fmt(value: float | None, digits: int = 4) -> str:
    """A number with ``digits`` decimals, or an en dash when missing."""
    return "–" if value is None else f"{value:.{digits}f}"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def run_table(runs: Sequence[Run]) -> list[str]:
    """The markdown table of the runs, one row each."""
    head = (
        "run",
        "engine",
        "model",
        "data",
        "processes",
        "parts",
        "epochs",
        "metric",
        "best val (epoch)",
        "test",
        "median epoch (s)",
        "total (s)",
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        val = r.final("val")
        best = r.data.get("best_epoch")
        row = (
            r.label,
            r.engine,
            r.model,
            r.dataset,
            r.world_size,
            r.data.get("num_parts", "–"),
            r.data.get("epochs", "–"),
            METRIC_NAMES.get(r.metric, r.metric),
            f"{fmt(val)} ({best})" if val is not None and best is not None else fmt(val),
            fmt(r.final("test")),
            fmt(r.median_epoch_seconds(), 3),
            fmt(r.total_seconds(), 1),
        )
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return lines


def _plain(value: Any) -> bool:
    """A scalar, or a short list of scalars (not a record such as a memory plan)."""
    scalar = (str, int, float, bool, type(None))
    return isinstance(value, scalar) or (
        isinstance(value, list) and len(value) <= 8 and all(isinstance(v, scalar) for v in value)
    )


def differing_settings(runs: Sequence[Run]) -> dict[str, list[Any]]:
    """The ``config`` settings every run has, with plain values not the same in every run
    (an engine's own extra settings and measured plans are left out)."""
    shared = set.intersection(*(set(r.config) for r in runs)) if runs else set()
    out = {}
    for k in sorted(shared - QUIET_SETTINGS):
        values = [r.config[k] for r in runs]
        if all(_plain(v) for v in values) and len({json.dumps(v) for v in values}) > 1:
            out[k] = values
    return out


def _sources(runs: Sequence[Run]) -> list[str]:
    lines = []
    for r in runs:
        where = [f"file `{r.path}`" if r.path else "handed over by `shoal train --report`"]
        if r.store:
            where.append(f"store `{r.store}`")
        elif r.data.get("graph"):
            where.append(f"graph `{r.data['graph']}`")
        cmd = r.data.get("command")
        if isinstance(cmd, list) and cmd:
            where.append("command `" + " ".join(str(c) for c in cmd).replace("`", "'") + "`")
        lines.append(f"- **{r.label}**: " + "; ".join(where))
    return lines


def render_markdown(
    runs: Sequence[Run], plots: Sequence[Plot], *, notes: Sequence[str] = ()
) -> str:
    """The text of ``report.md``: runs, settings that differ, figures written (linked, with
    their captions and the runs each left out), figures not written and why, other notes."""
    lines = ["# shoal run report", "", f"{len(runs)} run(s).", "", *run_table(runs), ""]
    lines += [
        "*best val*: validation metric of the kept (best-validation) weights and its epoch; "
        "*test*: the same weights on the test split; *median epoch*: median training seconds "
        "of an epoch (the slowest rank's); *total*: training epochs plus evaluation, launch "
        "and loading not included.",
        "",
        "## Runs",
        "",
        *_sources(runs),
        "",
    ]
    diff = differing_settings(runs) if len(runs) > 1 else {}
    if diff:
        lines += [
            "## Settings that differ",
            "",
            "| setting | " + " | ".join(_cell(r.label) for r in runs) + " |",
            "|" + "---|" * (len(runs) + 1),
        ]
        for k, values in diff.items():
            lines.append(f"| {k} | " + " | ".join(_cell(json.dumps(v)) for v in values) + " |")
        lines.append("")
    lines += ["## Plots", ""]
    skipped = []
    for p in plots:
        if p.figure is None:
            why = "; ".join(p.notes) if p.notes else "no run has its fields"
            skipped.append(f"- **{p.title}** (`{p.name}`): not drawn ({why})")
            continue
        lines += [f"### {p.title}", "", f"![{p.title}]({p.name})", "", p.caption, ""]
        lines += [f"- not shown: {n}" for n in p.notes]
        lines += [""] if p.notes else []
    if skipped or notes:
        lines += ["## Skipped", "", *skipped, *[f"- {n}" for n in notes], ""]
    return "\n".join(lines)
