"""Writing a report: the figures as PNGs and ``report.md`` into one directory."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shoal.errors import ShoalInputError
from shoal.report.figures import Plot, require_matplotlib, save_png
from shoal.report.ioplots import plot_bytes, plot_cache
from shoal.report.load import Run, StoreParts, load_store
from shoal.report.markdown import render_markdown
from shoal.report.plots import plot_loss, plot_time_split, plot_validation
from shoal.report.storeplots import plot_store
from shoal.utils.diskspace import reporting_full_disk
from shoal.utils.io import write_bytes_atomic

__all__ = ["EPOCH_PLOTS", "REPORT_FILE", "ReportConfig", "write_report"]

REPORT_FILE = "report.md"
#: The per-epoch figures of a report, in order.
EPOCH_PLOTS = (plot_loss, plot_validation, plot_time_split, plot_bytes, plot_cache)
#: Files of an earlier report in the same directory, removed when this one does not draw them.
_OWN_FILES = re.compile(r"^(loss|validation|time_split|bytes|cache|store(_\d+)?)\.png$")


@dataclass(kw_only=True)
class ReportConfig:
    """Options of a report.

    Attributes:
        store: a store whose parts to plot (default: the stores the runs recorded, when they
            can still be opened; single-process runs record none).
        dpi: resolution of the PNGs (default 110).
    """

    store: str | os.PathLike | None = None
    dpi: int = 110

    def __post_init__(self) -> None:
        if self.dpi < 30 or self.dpi > 600:
            raise ShoalInputError(f"dpi {self.dpi} is out of range", fix="pass 30 to 600")


def _stores(runs: Sequence[Run], cfg: ReportConfig, notes: list[str]) -> list[StoreParts]:
    """The stores to plot: ``cfg.store``, else each store the runs recorded that still opens
    (a note for one that does not)."""
    if cfg.store is not None:
        return [load_store(cfg.store)]
    out: list[StoreParts] = []
    seen: set[str] = set()
    for run in runs:
        if run.store is None or run.store in seen:
            continue
        seen.add(run.store)
        try:
            out.append(load_store(run.store))
        except ShoalInputError as e:
            notes.append(
                f"part sizes of store `{run.store}` (run {run.label}): not readable "
                f"({e}); pass --store S"
            )
    if not seen:
        notes.append(
            "part sizes and halo fractions: no run recorded a store (single-process "
            "runs train on a graph directory); pass --store S to plot one"
        )
    return out


def write_report(
    runs: Sequence[Run], out: str | os.PathLike, config: ReportConfig | None = None
) -> dict[str, Any]:
    """Draw the figures of ``runs`` and write them with ``report.md`` into ``out`` (created if
    needed; each file written atomically; PNGs of an earlier report there that this one does
    not draw are removed). Returns a summary: the files written, the figures and their notes.
    """
    require_matplotlib()
    cfg = config or ReportConfig()
    if not runs:
        raise ShoalInputError("no run to report", fix="pass at least one run JSON")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ShoalInputError(
            "the report's output is a file, not a directory",
            path=out,
            fix="pass a directory to --out (created if needed)",
        )
    notes: list[str] = []
    stores = _stores(runs, cfg, notes)
    plots: list[Plot] = [draw(runs) for draw in EPOCH_PLOTS]
    for k, parts in enumerate(stores):
        plots.append(
            plot_store(parts, name="store.png" if len(stores) == 1 else f"store_{k + 1}.png")
        )
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    written = [p.name for p in plots if p.figure is not None]
    report = out / REPORT_FILE

    def remove_new_dir() -> None:  # out of space: a directory this call made goes again
        if created:
            shutil.rmtree(out, ignore_errors=True)

    with reporting_full_disk(out, cleanup=remove_new_dir):
        for p in plots:
            if p.figure is not None:
                save_png(p.figure, out / p.name, dpi=cfg.dpi)
        for old in out.iterdir():
            if _OWN_FILES.match(old.name) and old.name not in written:
                old.unlink()
        write_bytes_atomic(report, render_markdown(runs, plots, notes=notes).encode("utf-8"))
    return {
        "out": str(out),
        "report": str(report),
        "runs": [{"label": r.label, "path": str(r.path) if r.path else None} for r in runs],
        "figures": [
            {
                "file": str(out / p.name) if p.figure is not None else None,
                "title": p.title,
                "notes": p.notes,
            }
            for p in plots
        ],
        "notes": notes,
    }
