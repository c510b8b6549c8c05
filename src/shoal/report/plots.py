"""The figures of a run's learning and time: loss, validation metric, epoch time split.

Each ``plot_*`` function takes the runs and returns a :class:`~shoal.report.figures.Plot`: the
figure (None when no run has the fields it needs) and a note for each run it left out. Runs
keep one colour in every figure (their position: ``C0``, ``C1``, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean
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
)
from shoal.report.load import Run, number

__all__ = ["METRIC_NAMES", "plot_loss", "plot_time_split", "plot_validation"]

#: Phases of the epoch records' ``time_split`` in the order they are stacked (others follow).
PHASE_ORDER = ("sampling", "gather", "io_wait", "receive_wait", "assemble", "local_compute",
               "cached_compute", "forward_backward", "backward", "communication", "allreduce",
               "averaging")  # fmt: skip
PHASE_NAMES = {"forward_backward": "forward + backward", "io_wait": "I/O wait",
               "allreduce": "all-reduce", "receive_wait": "receive wait"}  # fmt: skip
OTHER = "other (not timed)"
METRIC_NAMES = {"accuracy": "accuracy", "mrr": "MRR"}


def plot_loss(runs: Sequence[Run]) -> Plot:
    """Training loss per epoch, one line per run."""
    plot = Plot(name="loss.png", title="Training loss per epoch",
                caption="Mean training loss over each epoch's seeds (as the epoch records it).")  # fmt: skip
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
    plot = Plot(name="validation.png", title="Validation metric per epoch",
                caption="Validation metric at each evaluated epoch (exact inference); dashed: "
                "the test metric where the run recorded it (--eval-test); star: the epoch whose "
                "weights were kept (best validation).")  # fmt: skip
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
                ax.plot([best], [ys[xs.index(best)]], marker="*", markersize=14,
                        color=run_style(i)["color"], linestyle="none")  # fmt: skip
            if tx:
                ax.plot(tx, ty, label=f"{run.legend} test", **{**run_style(i), "linestyle": "--"})
        ax.set_title(f"Validation {name} per epoch")
        ax.set_ylabel(f"{name} (fraction)" if metric == "accuracy" else name)
        integer_epochs(ax)
        legend(ax, len(ax.get_legend_handles_labels()[1]))
    plot.figure = fig
    return plot


def _split_means(run: Run) -> tuple[dict[str, float], str] | None:
    """Mean seconds per epoch of each phase (epoch 1 left out when there are more: it holds
    the JIT compilation and the cache warm-up), plus the time no phase covers; and which
    epochs that is. None when the run records no time split."""
    recs = [r for r in run.history if isinstance(r.get("time_split"), dict) and r["time_split"]]
    if not recs:
        ts = run.data.get("time_split")
        if isinstance(ts, dict) and ts:
            return {k: number(v) or 0.0 for k, v in ts.items()}, "all epochs (the result's mean)"
        return None
    used = recs[1:] if len(recs) > 1 else recs
    keys = dict.fromkeys(k for r in used for k in r["time_split"])
    means = {k: fmean(number(r["time_split"].get(k)) or 0.0 for r in used) for k in keys}
    secs = [number(r.get("seconds")) for r in used]
    if all(s is not None for s in secs):
        rest = fmean(secs) - sum(means.values())
        if rest > 0.02 * fmean(secs):
            means[OTHER] = rest
    which = {1: "epoch 1", 2: "epoch 2"}.get(len(recs), f"epochs 2-{len(recs)}")
    return means, which


def _phase_order(keys: set[str]) -> list[str]:
    known = [k for k in PHASE_ORDER if k in keys]
    return known + sorted(keys - set(PHASE_ORDER) - {OTHER}) + ([OTHER] if OTHER in keys else [])


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


def plot_time_split(runs: Sequence[Run]) -> Plot:
    """A stacked bar per run of the mean seconds per epoch of each phase of its time split:
    in seconds (left) and as shares of the epoch (right, readable when runs differ in
    scale)."""
    plot = Plot(name="time_split.png", title="Epoch time split",
                caption="Mean seconds per epoch of each phase the epoch records time, epoch 1 "
                "left out when there are more (JIT compilation, cache warm-up), and the same as "
                "shares of the epoch; 'other' is the epoch time no phase covers (waiting on the "
                "slowest rank included). Phases are rank 0's; the epoch time is the slowest "
                "rank's.")  # fmt: skip
    have = []
    for i, run in enumerate(runs):
        got = _split_means(run)
        if got is None:
            plot.notes.append(f"{run.label}: no `time_split` in its epoch records")
        else:
            have.append((i, run, *got))
    if not have:
        return plot
    phases = _phase_order({k for *_, means, _ in have for k in means})
    fig, (secs, share) = new_figure(2, width=max(8.0, 3.5 + 1.3 * len(have)), height=9.5,
                                    rows=True)  # fmt: skip
    totals = [sum(means.values()) or 1.0 for *_, means, _ in have]
    layers = [
        (
            PHASE_NAMES.get(p, p.replace("_", " ")),
            [m.get(p, 0.0) for *_, m, _ in have],
            {"color": _phase_colour(j, p)},
        )
        for j, p in enumerate(phases)
    ]
    tops = stacked(secs, layers)
    for x, (top, (*_, which)) in enumerate(zip(tops, have, strict=True)):
        secs.annotate(f"{top:.3g} s\n({which})", (x, top), ha="center", va="bottom",
                      fontsize=8, xytext=(0, 2), textcoords="offset points")  # fmt: skip
    secs.set_ylim(0, max(tops) * 1.2 or 1.0)
    secs.set_ylabel("seconds per epoch (mean)")
    secs.set_title("Seconds per epoch by phase")
    stacked(share, [(lab, [100 * v / t for v, t in zip(hs, totals, strict=True)], st)
                     for lab, hs, st in layers])  # fmt: skip
    share.set_ylim(0, 100)
    share.set_ylabel("share of the epoch (%)")
    share.set_title("Share of the epoch by phase")
    for ax in (secs, share):
        ax.set_xticks(range(len(have)), bar_labels([run for _, run, *_ in have]))
        ax.grid(True, axis="y", alpha=0.3)
    secs.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), title="phase")
    plot.figure = fig
    return plot
