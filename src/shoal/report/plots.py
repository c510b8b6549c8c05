"""The figures of a run's learning and time: loss, validation metric, epoch time split.

Each ``plot_*`` function takes the runs and returns a :class:`~shoal.report.figures.Plot`: the
figure (None when no run has the fields it needs) and a note for each run it left out. Runs
keep one colour in every figure (their position: ``C0``, ``C1``, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shoal.report.figures import (
    Plot,
    bar_labels,
    integer_epochs,
    legend,
    marker,
    new_figure,
    run_style,
    stacked,
    top_label,
)
from shoal.report.load import Run, number
from shoal.report.phases import OTHER, PHASE_NAMES, EpochBars, epoch_bars, phase_order

__all__ = ["METRIC_NAMES", "plot_loss", "plot_time_split", "plot_validation"]

METRIC_NAMES = {"accuracy": "accuracy", "mrr": "MRR"}


def plot_loss(runs: Sequence[Run]) -> Plot:
    """Training loss per epoch, one line per run."""
    plot = Plot(
        name="loss.png",
        title="Training loss per epoch",
        caption="Mean training loss over each epoch's seeds (as the epoch records it).",
    )
    have = []
    for i, run in enumerate(runs):
        xs, ys = run.series("loss")
        if xs:
            have.append((i, run, xs, ys))
        else:
            plot.notes.append(f"{run.label}: no `loss` in its epoch records")
    if not have:
        return plot
    fig, (ax,) = new_figure()
    for i, run, xs, ys in have:
        ax.plot(xs, ys, marker=marker(len(xs)), label=run.legend, **run_style(i))
    ax.set_title("Training loss per epoch")
    ax.set_ylabel("loss (mean per training seed)")
    integer_epochs(ax)
    legend(ax, len(have))
    plot.figure = fig
    return plot


def plot_validation(runs: Sequence[Run]) -> Plot:
    """Validation metric (accuracy or MRR) at each evaluated epoch, one panel per metric;
    the test metric too where the run recorded it (``--eval-test``), dashed; a star marks the
    best-validation epoch."""
    plot = Plot(
        name="validation.png",
        title="Validation metric per epoch",
        caption="Validation metric at each evaluated epoch (exact inference); dashed: "
        "the test metric where the run recorded it (--eval-test); star: the epoch whose "
        "weights were kept (best validation).",
    )
    by_metric: dict[str, list[tuple[int, Run]]] = {}
    for i, run in enumerate(runs):
        if run.series(f"val_{run.metric}")[0]:
            by_metric.setdefault(run.metric, []).append((i, run))
        else:
            plot.notes.append(f"{run.label}: no `val_{run.metric}` in its epoch records")
    if not by_metric:
        return plot
    fig, axes = new_figure(len(by_metric), width=8.0 * len(by_metric) ** 0.75, height=5.5)
    for ax, (metric, group) in zip(axes, by_metric.items(), strict=True):
        name = METRIC_NAMES.get(metric, metric)
        for i, run in group:
            xs, ys = run.series(f"val_{metric}")
            tx, ty = run.series(f"test_{metric}")
            label = f"{run.legend} val" if tx else run.legend
            ax.plot(xs, ys, marker=marker(len(xs)), label=label, **run_style(i))
            best = int(number(run.data.get("best_epoch")) or 0)
            if best in xs:
                ax.plot(
                    [best],
                    [ys[xs.index(best)]],
                    marker="*",
                    markersize=14,
                    color=run_style(i)["color"],
                    linestyle="none",
                )
            if tx:
                ax.plot(tx, ty, label=f"{run.legend} test", **{**run_style(i), "linestyle": "--"})
        ax.set_title(f"Validation {name} per epoch")
        ax.set_ylabel(f"{name} (fraction)" if metric == "accuracy" else name)
        integer_epochs(ax)
        legend(ax, len(ax.get_legend_handles_labels()[1]))
    plot.figure = fig
    return plot


def _phase_colour(j: int, phase: str) -> Any:
    """Distinct colours for the phases: tab10 without its grey, then tab20's light shades;
    light grey for the time no phase covers."""
    from matplotlib import colormaps

    if phase == OTHER:
        return "0.8"
    strong = [0, 1, 2, 3, 4, 5, 6, 8, 9]
    if j < len(strong):
        return colormaps["tab10"](strong[j])
    return colormaps["tab20"]((2 * (j - len(strong)) + 1) % 20)


def _phase_name(phase: str) -> str:
    return PHASE_NAMES.get(phase, phase.replace("_", " "))


#: Where each run's bars stand around its tick: the epoch's stack, and beside it (when some run
#: has them) the reading thread's phases.
_STACK_ALONE = {"offset": 0.0, "width": 0.6}
_STACK_BESIDE = {"offset": -0.12, "width": 0.5}
_BACKGROUND_BAR = {"offset": 0.27, "width": 0.18}


def _draw_background(ax: Any, have: list[tuple[Run, EpochBars]], colours: dict) -> list[float]:
    """The reading thread's phases of each run as a thin hatched stack beside its epoch;
    returns their tops (0 for runs without)."""
    phases = phase_order({p for _, b in have for p in b.background})
    layers = [
        (
            f"{_phase_name(p)} (reading thread: overlaps the epoch)",
            [b.background.get(p, 0.0) for _, b in have],
            {"facecolor": "white", "edgecolor": colours[p], "hatch": "////", "linewidth": 1.0},
        )
        for p in phases
    ]
    tops = stacked(ax, layers, **_BACKGROUND_BAR)
    for x, top in enumerate(tops):
        if top > 0:
            top_label(ax, f"{top:.3g} s", x + _BACKGROUND_BAR["offset"], top, fontsize=7)
    return tops


def plot_time_split(runs: Sequence[Run]) -> Plot:
    """A stacked bar per run of the mean seconds per epoch of each phase of the training
    thread, up to the measured epoch (the rest: 'other'), with the phases of a reading thread
    that overlap the epoch as a thin hatched bar beside it (:mod:`shoal.report.phases`); in
    seconds (top) and the stack as shares of the epoch (bottom, readable when runs differ in
    scale)."""
    plot = Plot(
        name="time_split.png",
        title="Epoch time split",
        caption="Mean seconds per epoch of each phase the epoch records time, epoch 1 left out "
        "when there are more (JIT compilation, cache warm-up), and the same as shares of the "
        "epoch. Each stack adds up to the measured epoch (black line; the slowest rank's): "
        "'other' is the epoch time no phase covers (waiting on the slowest rank included). "
        "Phases timed on a reading thread while the epoch trains (reading windows and packs "
        "ahead, and its sampling) overlap the epoch: they are the hatched bar beside the "
        "stack, not part of it (the training thread's share of them is its I/O wait). Phases "
        "are rank 0's.",
    )
    have: list[tuple[Run, EpochBars]] = []
    for run in runs:
        bars = epoch_bars(run)
        if bars is None:
            plot.notes.append(f"{run.label}: no `time_split` in its epoch records")
        else:
            have.append((run, bars))
    if not have:
        return plot
    every = phase_order({p for _, b in have for p in (*b.stacked, *b.background)})
    colours = {p: _phase_colour(j, p) for j, p in enumerate(every)}
    beside = any(b.background for _, b in have)
    place = _STACK_BESIDE if beside else _STACK_ALONE
    fig, (secs, share) = new_figure(
        2, width=max(8.0, 3.5 + (1.6 if beside else 1.3) * len(have)), height=9.5, rows=True
    )
    fore = phase_order({p for _, b in have for p in b.stacked})
    layers = [
        (_phase_name(p), [b.stacked.get(p, 0.0) for _, b in have], {"color": colours[p]})
        for p in fore
    ]
    tops = stacked(secs, layers, **place)
    half = place["width"] / 2
    for x, (top, (_, b)) in enumerate(zip(tops, have, strict=True)):
        xc = x + place["offset"]
        if b.epoch_seconds is not None:
            label = "measured epoch (mean)" if x == 0 else None
            secs.hlines(b.epoch_seconds, xc - half, xc + half, colors="black", label=label)
        top_label(secs, f"{top:.3g} s\n({b.epochs})", xc, top)
    highest = max(tops)
    if beside:
        highest = max(highest, *_draw_background(secs, have, colours))
    secs.set_ylim(0, highest * 1.2 or 1.0)
    secs.set_ylabel("seconds per epoch (mean)")
    secs.set_title("Seconds per epoch by phase")
    shares = [
        (lab, [100 * v / (t or 1.0) for v, t in zip(hs, tops, strict=True)], st)
        for lab, hs, st in layers
    ]
    stacked(share, shares, **place)
    share.set_ylim(0, 100)
    share.set_ylabel("share of the epoch (%)")
    share.set_title("Share of the epoch by phase (reading thread not included)")
    for ax in (secs, share):
        ax.set_xticks(range(len(have)), bar_labels([run for run, _ in have]))
        ax.grid(True, axis="y", alpha=0.3)
    secs.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), title="phase")
    plot.figure = fig
    return plot
