"""The ``minibatch`` engine's estimated epoch for ``--engine auto`` (DistDGL)."""

from __future__ import annotations

from shoal.engines.costs import CostInputs, net_seconds, split

__all__ = ["estimate"]


def estimate(x: CostInputs) -> dict[str, float]:
    """``ceil(T / (B N))`` steps of sampling, gathering the batch's own rows, computing,
    pulling the halo share of the rows (and their neighbour lists: one round trip per hop)
    from their owners and all-reducing the gradients; its batches are the part's grown by
    ``remote_scale`` (the owners expand the halo nodes)."""
    c, g, h = x.costs, x.remote_scale, x.costs.halo_fraction
    hops = len(x.config.sampling.fanouts)
    return split(
        x.steps,
        sampling=c.sample_s * g,
        compute=c.compute_s * g,
        gather=x.gather(halo=False) * g * (1 - h * x.remote),
        communication=x.remote * net_seconds(c.batch_rows * g * h * x.row_bytes, 2 * hops + 2, c),
        allreduce=x.allreduce(),
    )
