"""The ``averaging`` engine's estimated epoch for ``--engine auto`` (SDT-GNN)."""

from __future__ import annotations

from shoal.engines.averaging.config import AveragingConfig
from shoal.engines.costs import CostInputs, split

__all__ = ["estimate"]


def estimate(x: CostInputs) -> dict[str, float]:
    """The part's own batches, every row local (parts carry their halos), and one
    all-reduce of the model (and of Adam's two moments with ``average_optimizer``) per
    ``average_every`` epochs."""
    c, opts = x.costs, x.config.engine
    if not isinstance(opts, AveragingConfig):
        opts = AveragingConfig(**{**opts.shared(), "name": "averaging"})
    models = 3 if opts.average_optimizer else 1  # the weights and Adam's two moments
    return split(
        x.steps,
        sampling=c.sample_s,
        gather=x.gather(halo=True),
        compute=c.compute_s,
        allreduce=x.allreduce() * models / (x.steps * opts.average_every),
    )
