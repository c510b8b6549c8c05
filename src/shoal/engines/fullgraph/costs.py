"""The ``fullgraph`` engine's estimated epoch for ``--engine auto`` (NeutronStar)."""

from __future__ import annotations

from shoal.engines.costs import CostInputs, net_seconds, split

__all__ = ["FULLGRAPH_MODELS", "estimate", "excluded"]

#: models the fullgraph engine runs (it works layer by layer inside shoal's models)
FULLGRAPH_MODELS = ("gcn", "sage", "gin")


def estimate(x: CostInputs) -> dict[str, float]:
    """One pass of every layer over the largest rank's nodes (each probed layer scaled by
    the rank's core + halo rows over the probe's sources when it applies its linear map
    before aggregating -- GCN and SAGE narrowing the width -- else by its core nodes over the
    probe's), its rows read once, the mirrors' hidden rows exchanged forward and back at
    every layer above the input (DepComm; Hybrid caches only what is cheaper, so DepComm
    bounds it)."""
    c, n, widths = x.costs, x.workers, x.widths
    parts = x.store.meta["parts"]
    per_rank = [[p for j, p in enumerate(parts) if j % n == r] for r in range(n)]
    core = max(sum(p["num_core"] for p in ps) for ps in per_rank)
    halo = max(sum(p["num_halo"] for p in ps) for ps in per_rank)
    compute = 0.0
    for i, t in enumerate(c.layer_s):  # each probed layer scaled to the rank's rows
        on_sources = x.config.model.name in ("gcn", "sage") and widths[i + 1] < widths[i]
        compute += (
            t * (core + halo) / max(c.layer_sources, 1)
            if on_sources
            else t * core / max(c.layer_nodes, 1)
        )
    row_s = c.gather_s / max(c.batch_rows, 1.0)
    comm = 0.0
    if n > 1:
        hidden_bytes = sum(4 * w for w in widths[1:-1])
        comm = net_seconds(2 * halo * hidden_bytes, 2 * (len(widths) - 2) * (n - 1), c)
    return split(
        1.0,
        gather=(core + halo) * row_s,
        compute=compute,
        communication=comm,
        allreduce=x.allreduce(),
    )


def excluded(x: CostInputs) -> str | None:
    if x.config.model.factory:
        return "runs shoal's own models only (--model-factory given)"
    if x.config.model.name not in FULLGRAPH_MODELS:
        return f"runs {', '.join(FULLGRAPH_MODELS)}, not {x.config.model.name}"
    return None
