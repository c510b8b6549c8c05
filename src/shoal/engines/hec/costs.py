"""The ``hec`` engine's estimated epoch for ``--engine auto`` (DistGNN-MB)."""

from __future__ import annotations

from shoal.engines.costs import CostInputs, net_seconds, split

__all__ = ["estimate", "excluded"]


def estimate(x: CostInputs) -> dict[str, float]:
    """``minibatch`` whose remote rows are the cached hidden-width embeddings instead of
    input features."""
    c, h = x.costs, x.costs.halo_fraction
    return split(
        x.steps,
        sampling=c.sample_s,
        gather=x.gather(halo=False) * (1 - h * x.remote),
        compute=c.compute_s,
        communication=x.remote * net_seconds(c.batch_rows * h * 4 * x.hidden, 4, c),
        allreduce=x.allreduce(),
    )


def excluded(x: CostInputs) -> str | None:
    if x.config.model.factory:
        return "runs shoal's own models only (--model-factory given)"
    return None
