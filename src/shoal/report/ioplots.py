"""The figures of a run's data movement: bytes per epoch and cache hit rates (see
:mod:`shoal.report.plots` for the conventions)."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean
from typing import TYPE_CHECKING, Any

from shoal.report.figures import (
    Plot,
    bar_labels,
    byte_unit,
    integer_epochs,
    legend,
    marker,
    new_figure,
    run_style,
    stacked,
    top_label,
)
from shoal.report.load import Run, number

if TYPE_CHECKING:
    from shoal.engines.spec import ReportField

__all__ = ["BYTE_KINDS", "plot_bytes", "plot_cache"]


def _engine_fields() -> tuple[ReportField, ...]:
    """The fields of their own that engines add to their epoch records (each registered
    spec's ``report_fields``), read from the registry when a figure is drawn."""
    from shoal.engines.registry import report_fields

    return report_fields()


def _record_bytes(
    rec: dict[str, Any], fields: Sequence[ReportField] = ()
) -> dict[str, float | None]:
    """An epoch record's bytes: sent point to point, all-reduced, read from disk (the shared
    ``io`` counters and the engines' ``fields`` that count disk bytes; None where the record
    has no such field)."""
    comm = rec.get("comm") if isinstance(rec.get("comm"), dict) else {}
    disk_fields = [
        (rec.get("io"), "bytes_read"),
        (rec.get("io"), "structure_bytes_read"),
        *((rec.get(f.key), "bytes_read") for f in fields if f.disk_bytes),
    ]
    disk = [number(d.get(k)) for d, k in disk_fields if isinstance(d, dict)]
    disk = [v for v in disk if v is not None]
    return {
        "sent": number(comm.get("bytes_sent")),
        "all-reduced": number(comm.get("allreduce_bytes")),
        "read from disk": sum(disk) if disk else None,
    }


BYTE_KINDS = ("sent", "all-reduced", "read from disk")


def plot_bytes(runs: Sequence[Run]) -> Plot:
    """Left: network bytes (sent + all-reduced) per epoch, a line per run; right: the mean
    per epoch by kind, a stacked bar per run."""
    plot = Plot(
        name="bytes.png",
        title="Bytes per epoch",
        caption="Bytes moved per epoch, summed over ranks: sent point to point (feature "
        "rows, embeddings, batches), all-reduced (gradients or weights) and read from "
        "disk (feature rows and neighbour lists not in memory).",
    )
    have = []
    fields = _engine_fields()
    for i, run in enumerate(runs):
        recs = [_record_bytes(r, fields) for r in run.history]
        if any(v is not None for rec in recs for v in rec.values()):
            have.append((i, run, recs))
        else:
            plot.notes.append(f"{run.label}: no byte counters (`comm`, `io`) in its epoch records")
    if not have:
        return plot
    largest = max(sum(v or 0.0 for v in rec.values()) for *_, recs in have for rec in recs)
    if largest == 0:
        plot.notes.append("every run moved 0 bytes: no traffic, nothing read from disk")
        return plot
    scale, unit = byte_unit(largest)
    fig, (left, right) = new_figure(2, width=max(12.0, 7.0 + 1.1 * len(have)), height=5.8)
    for i, run, recs in have:
        net = [((r["sent"] or 0.0) + (r["all-reduced"] or 0.0)) / scale for r in recs]
        ep = run.epochs()
        left.plot(ep, net, marker=marker(len(ep)), label=run.legend, **run_style(i))
    left.set_title("Network bytes per epoch (sent + all-reduced)")
    left.set_ylim(bottom=0)  # from zero: a flat line is not a swing
    left.set_ylabel(f"{unit} per epoch")
    integer_epochs(left)
    legend(left, len(have))
    styles = ({"color": "C7"}, {"color": "C9", "hatch": "//"}, {"color": "C8", "hatch": ".."})
    means = [
        (kind, [fmean(r[kind] or 0.0 for r in recs) / scale if recs else 0.0 for *_, recs in have])
        for kind in BYTE_KINDS
    ]
    tops = stacked(right, [(kind, ms, st) for (kind, ms), st in zip(means, styles, strict=True)])
    for x, top in enumerate(tops):
        top_label(right, f"{top:.3g} {unit}", x, top)
    right.set_ylim(0, max(tops) * 1.15)
    right.set_xticks(range(len(have)), bar_labels([run for _, run, _ in have]))
    right.set_ylabel(f"{unit} per epoch (mean)")
    right.set_title("Mean bytes per epoch by kind")
    right.grid(True, axis="y", alpha=0.3)
    right.legend()
    plot.figure = fig
    return plot


def _hit_rates(
    run: Run, fields: Sequence[ReportField] = ()
) -> dict[str, tuple[list[int], list[float]]]:
    """Per cache of the run: epochs and hit rates in % (the feature cache, then the caches
    of the engines' ``fields``, one per layer for a per-layer field)."""
    out: dict[str, tuple[list[int], list[float]]] = {}

    def add(name: str, epoch: int, value: Any) -> None:
        v = number(value)
        if v is not None:
            xs, ys = out.setdefault(name, ([], []))
            xs.append(epoch)
            ys.append(100.0 * v)

    for e, r in zip(run.epochs(), run.history, strict=True):
        if isinstance(r.get("io"), dict):
            add("feature cache", e, r["io"].get("cache_hit_rate"))
        for f in fields:
            if f.cache is None:
                continue
            value = r.get(f.key)
            if not f.per_layer:
                if isinstance(value, dict):
                    add(f.cache, e, value.get("hit_rate"))
                continue
            for layer in value or []:
                if isinstance(layer, dict):
                    add(f"{f.cache}, layer {layer.get('layer', '?')}", e, layer.get("hit_rate"))
    return out


CACHE_STYLES: tuple[tuple[str, str], ...] = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))


def plot_cache(runs: Sequence[Run]) -> Plot:
    """Hit rate of every cache a run records, per epoch (colour: run; line style: cache)."""
    fields = [f for f in _engine_fields() if f.cache is not None]
    caches = ["the feature cache (rows of high-degree nodes kept in memory)"]
    caches += [f.caption or f.cache or "" for f in fields]
    plot = Plot(
        name="cache.png",
        title="Cache hit rates",
        caption="Share of lookups served by a cache, per epoch, summed over ranks: "
        + ", ".join(caches)
        + ".",
    )
    have = []
    for i, run in enumerate(runs):
        rates = _hit_rates(run, fields)
        if rates:
            have.append((i, run, rates))
        else:
            plot.notes.append(f"{run.label}: no cache hit rates in its epoch records")
    if not have:
        return plot
    kinds = list(dict.fromkeys(k for *_, rates in have for k in rates))
    fig, (ax,) = new_figure(width=9.0, height=5.5)
    for k, (i, run, rates) in enumerate(have):
        size = min(16.0, 4.0 + 3.0 * (len(have) - 1 - k))  # equal rates show as rings
        for kind, (xs, ys) in rates.items():
            ls, mk = CACHE_STYLES[kinds.index(kind) % len(CACHE_STYLES)]
            ax.plot(
                xs,
                ys,
                label=f"{run.legend}: {kind}",
                color=run_style(i)["color"],
                linestyle=ls,
                marker=mk if len(xs) <= 40 else None,
                markersize=size,
                markerfacecolor="none",
                markeredgewidth=1.5,
            )
    ax.set_ylim(-3, 103)
    ax.set_ylabel("hit rate (%)")
    ax.set_title("Cache hit rates per epoch")
    integer_epochs(ax)
    legend(ax, len(ax.get_legend_handles_labels()[1]), fontsize=8)
    plot.figure = fig
    return plot
