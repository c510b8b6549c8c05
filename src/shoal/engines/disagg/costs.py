"""The ``disagg`` engine's estimated epoch for ``--engine auto`` (Armada)."""

from __future__ import annotations

import math

from shoal.engines.costs import CostInputs, net_seconds, store_bytes
from shoal.engines.disagg.plan import default_batch_workers

__all__ = ["estimate", "excluded"]


def estimate(x: CostInputs) -> dict[str, float] | None:
    """``ceil(N/2)`` batch workers sample and gather for ``N - ceil(N/2)`` compute workers,
    which receive each batch's rows, and stream every part in once per epoch (its features
    and edge buckets, at the probed sequential read rate); the slower side sets the pace.
    None on one process."""
    c, n, g = x.costs, x.workers, x.remote_scale
    if n < 2:
        return None
    nb = default_batch_workers(n)
    nc = n - nb
    batches = math.ceil(x.train_nodes / x.config.sampling.batch_size)
    stream = (
        store_bytes(x.store) / nb / c.seq_read_bytes_per_s
        if math.isfinite(c.seq_read_bytes_per_s)
        else 0.0
    )
    prep = batches * (c.sample_s + c.gather_s) * g / nb + stream
    comp = batches / nc * (c.compute_s * g + net_seconds(c.batch_rows * g * x.row_bytes, 1, c))
    e = {
        "preparation": prep,
        "streaming": stream,
        "compute": comp,
        "allreduce": math.ceil(batches / nc) * x.allreduce(nc),
    }
    e["epoch_s"] = max(prep, comp) + e["allreduce"]
    return e


def excluded(x: CostInputs) -> str | None:
    if x.workers < 2:
        return "needs at least 2 processes (batch and compute workers)"
    if x.store.num_parts < default_batch_workers(x.workers):
        return f"{x.store.num_parts} parts for {default_batch_workers(x.workers)} batch workers"
    return None
