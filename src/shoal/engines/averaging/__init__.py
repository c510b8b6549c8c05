"""``averaging``: local training on parts + weighted model averaging (SDT-GNN)."""

from shoal.engines.averaging import costs, options
from shoal.engines.averaging.config import AveragingConfig
from shoal.engines.spec import EngineSpec

__all__ = ["SPEC", "AveragingConfig"]

SPEC = EngineSpec(
    name="averaging",
    summary="local training on parts + weighted model averaging every k epochs, needs a "
    "store built with --halo-features (SDT-GNN)",
    engine="shoal.engines.averaging.engine:AveragingEngine",
    config=AveragingConfig,
    typed=True,  # fanouts per relation, every type's rows in one source
    tasks=("node", "link"),  # the link task on each part's own edges (link_scope "part")
    add_arguments=options.add_arguments,
    estimate=costs.estimate,
    demo="SDT-GNN-style: each process trains on its own parts alone, models averaged every epoch",
)
