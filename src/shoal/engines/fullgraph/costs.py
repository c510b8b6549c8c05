"""The ``fullgraph`` engine's estimated epoch for ``--engine auto`` (NeutronStar) and its
memory: what a rank must hold, checked against its budget at start."""

from __future__ import annotations

from shoal.engines.costs import CostInputs, net_seconds, split
from shoal.errors import ShoalInputError

__all__ = ["FULLGRAPH_MODELS", "check_fits", "estimate", "excluded", "memory_bytes"]

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


def memory_bytes(*, rows: int, row_bytes: int, widths: list[int], edges: int) -> int:
    """A lower bound of what one rank's full-graph epoch holds in memory besides the
    structure: its ``rows`` feature rows (read once, kept: NeutronStar's level 0), each
    layer's output for those rows with its gradient and one saved intermediate (3 floats per
    row and output width), and each layer's edge list as two int64 arrays (``edges`` edges).
    The replicated and mirrored rows of remote dependencies come on top."""
    layers = len(widths) - 1
    activations = 3 * 4 * rows * sum(widths[1:])
    return rows * row_bytes + activations + 16 * edges * layers


def check_fits(
    need: int, pool: int, *, rank_parts: int, num_parts: int, world: int, option: str = "--memory"
) -> None:
    """Refuse at start (ShoalInputError) when a rank's full-graph state, ``need`` bytes
    (:func:`memory_bytes`) for its ``rank_parts`` parts, exceeds ``pool``, what its memory
    budget leaves beside the reserve and the structure: the message names the memory needed
    and how many parts a rank could hold."""
    if need <= pool:
        return
    mib = 1 << 20
    per_part = need / max(rank_parts, 1)
    fit = int(pool // per_part) if per_part else 0
    more = f"raise {option} by about {(need - pool) / mib + 1:.0f} MiB"
    if fit >= 1:  # fewer parts per rank would fit: more processes
        spread = f"run on at least {-(-num_parts // fit)} processes (of {world} now)"
    else:  # not even one part: smaller parts
        smaller = -(-num_parts * per_part // max(pool, 1))
        spread = f"partition the graph into at least {int(smaller)} parts (one now needs more)"
    raise ShoalInputError(
        f"fullgraph keeps every row and layer of a rank's parts in memory: this rank's "
        f"{rank_parts} part(s) need about {need / mib:.0f} MiB (features, 3x each layer's "
        f"activations, edge lists), its memory budget leaves {pool / mib:.0f} MiB beside the "
        f"reserve and the graph structure; a rank holds about {fit} part(s) of this size",
        fix=f"{more}, {spread}, or use --engine minibatch or averaging, which read feature "
        "rows in windows within the budget",
    )
