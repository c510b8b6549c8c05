"""The store figure of a report: part sizes and halo fractions from the store's ``meta.json``."""

from __future__ import annotations

from shoal.report.figures import Plot, new_figure
from shoal.report.load import StoreParts

__all__ = ["plot_store"]


def plot_store(parts: StoreParts, *, name: str = "store.png") -> Plot:
    """Three panels, a bar per part: core and halo nodes (stacked), in-edges, halo fraction."""
    plot = Plot(
        name=name,
        title=f"Parts of store {parts.name}",
        caption=f"Store `{parts.path}`: per part, its core nodes (owned) and halo nodes "
        "(in-neighbours owned by other parts, held as copies), the in-edges of its core "
        "nodes, and its halo fraction: halo / (core + halo) nodes.",
    )
    n = parts.num_parts
    fig, (nodes, edges, frac) = new_figure(3, width=max(12.0, 9.0 + 0.35 * n), height=4.6)
    xs = list(range(n))
    thin = n > 24  # many parts: no per-bar labels
    nodes.bar(xs, parts.core, 0.7, label="core", color="C0")
    nodes.bar(xs, parts.halo, 0.7, bottom=parts.core, label="halo", color="C1")
    nodes.set_title("Nodes per part")
    nodes.set_ylabel("nodes")
    nodes.set_ylim(
        0, max((c + h for c, h in zip(parts.core, parts.halo, strict=True)), default=1) * 1.2
    )
    nodes.legend(loc="upper left", ncols=2)
    edges.bar(xs, parts.edges, 0.7, color="C2")
    edges.set_title("In-edges per part")
    edges.set_ylabel("edges (in-edges of core nodes)")
    fr = [100.0 * f for f in parts.halo_fraction()]
    bars = frac.bar(xs, fr, 0.7, color="C1")
    mean = sum(fr) / n if n else 0.0
    frac.axhline(mean, color="0.3", linestyle="--", linewidth=1, label=f"mean {mean:.1f}%")
    frac.set_title("Halo fraction per part")
    frac.set_ylabel("halo / (core + halo) nodes (%)")
    frac.set_ylim(0, min(100.0, max(fr, default=0.0) * 1.3 + 1.0))
    frac.legend(loc="upper left")
    if not thin:
        frac.bar_label(bars, fmt="%.1f", fontsize=8)
    for ax in (nodes, edges, frac):
        ax.set_xlabel("part")
        ax.set_xticks(xs if not thin else xs[:: max(1, n // 12)])
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"Store {parts.name}: {n} parts, {sum(parts.core)} nodes")
    plot.figure = fig
    return plot
