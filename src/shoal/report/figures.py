"""Shared pieces of a report's figures: the :class:`Plot` record, figure creation, PNG output,
one colour per run, legends and stacked bars.

Figures are ``matplotlib.figure.Figure`` objects rendered with the Agg canvas: pyplot and its
global backend are never touched, and matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.errors import ShoalInputError
from shoal.report.load import Run
from shoal.utils.io import write_bytes_atomic

__all__ = [
    "MATPLOTLIB_FIX",
    "Plot",
    "bar_labels",
    "byte_unit",
    "integer_epochs",
    "legend",
    "marker",
    "new_figure",
    "require_matplotlib",
    "run_style",
    "save_png",
    "stacked",
    "top_label",
]

MATPLOTLIB_FIX = "install the report extra: pip install 'shoal[report]' (or matplotlib>=3.7)"


@dataclass(kw_only=True)
class Plot:
    """One figure of a report.

    Attributes:
        name: its file name (``loss.png``).
        title: its heading in ``report.md``.
        caption: what it shows, under it in ``report.md``.
        notes: one line per run left out (and why).
        figure: the matplotlib figure, None when no run has what it needs.
    """

    name: str
    title: str
    caption: str = ""
    notes: list[str] = field(default_factory=list)
    figure: Any = None


def require_matplotlib() -> None:
    """Raise ShoalInputError (exit 2 in the CLI) when matplotlib is not installed."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise ShoalInputError("plots need matplotlib, which is not installed", fix=MATPLOTLIB_FIX)


def new_figure(
    n: int = 1, *, width: float = 8.0, height: float = 4.8, rows: bool = False
) -> tuple[Any, list]:
    """A figure (constrained layout) and its ``n`` axes, in one row (or one column)."""
    require_matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    grid = fig.subplots(n, 1, squeeze=False)[:, 0] if rows else fig.subplots(1, n, squeeze=False)[0]
    return fig, list(grid)


def save_png(fig: Any, path: str | Path, *, dpi: int = 110) -> None:
    """Render ``fig`` as a PNG written atomically to ``path``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    write_bytes_atomic(path, buf.getvalue())


def run_style(i: int) -> dict[str, Any]:
    """Colour (and past ten runs, a line style) of the ``i``-th run in every figure."""
    return {"color": f"C{i % 10}", "linestyle": ("-", "--", ":", "-.")[(i // 10) % 4]}


def integer_epochs(ax: Any) -> None:
    """An epoch x axis: integer ticks, its label, a light grid."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.grid(True, alpha=0.3)


def marker(n: int) -> str | None:
    """Point markers on a line of ``n`` points, unless they would crowd it."""
    return "o" if n <= 40 else None


def bar_labels(runs: Sequence[Run]) -> list[str]:
    """Tick labels of a bar per run: its label, then its engine (when another word) and
    processes."""
    out = []
    for r in runs:
        engine = "" if r.engine == r.label else f"{r.engine}\n"
        out.append(f"{r.label}\n{engine}{r.world_size} proc")
    return out


def legend(ax: Any, entries: int, **kw: Any) -> None:
    """A legend inside the axes for a few entries, below them in columns for more."""
    if entries <= 4:
        ax.legend(loc="best", **kw)
    else:
        ax.legend(
            loc="upper center", bbox_to_anchor=(0.5, -0.14), ncols=2 if entries < 9 else 3, **kw
        )


def byte_unit(largest: float) -> tuple[float, str]:
    """``(scale, name)`` of the largest decimal unit (bytes, kB, MB, GB) not above
    ``largest`` bytes."""
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if largest >= scale:
            return scale, unit
    return 1.0, "bytes"


def stacked(
    ax: Any,
    layers: list[tuple[str, list[float], dict[str, Any]]],
    *,
    offset: float = 0.0,
    width: float = 0.6,
) -> list[float]:
    """Stack ``(label, heights, bar style)`` layers as bars of ``width`` at 0, 1, ... (shifted
    by ``offset``: a second bar beside each); returns the tops."""
    tops = [0.0] * len(layers[0][1]) if layers else []
    xs = [x + offset for x in range(len(tops))]
    for label, heights, style in layers:
        kw = {"edgecolor": "white", "linewidth": 0.5, **style}
        ax.bar(xs, heights, width, bottom=tops, label=label, **kw)
        tops = [t + h for t, h in zip(tops, heights, strict=True)]
    pad = 0.5 + max(0.0, (3 - len(tops)) * 0.4)  # one or two bars: not as wide as the axes
    ax.set_xlim(-pad, len(tops) - 1 + pad)
    return tops


def top_label(ax: Any, text: str, x: float, top: float, fontsize: int = 8) -> None:
    """``text`` centred just above the bar of ``x`` whose top is ``top``."""
    ax.annotate(
        text,
        (x, top),
        ha="center",
        va="bottom",
        fontsize=fontsize,
        xytext=(0, 2),
        textcoords="offset points",
    )
