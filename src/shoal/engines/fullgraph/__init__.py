"""``fullgraph``: full-graph training with DepCache / DepComm / Hybrid dependencies
(NeutronStar)."""

from shoal.engines.fullgraph import costs, options
from shoal.engines.fullgraph.config import FullGraphConfig
from shoal.engines.spec import EngineSpec

__all__ = ["SPEC", "FullGraphConfig"]

SPEC = EngineSpec(
    name="fullgraph",
    summary="full-graph training, remote dependencies communicated or recomputed (NeutronStar)",
    engine="shoal.engines.fullgraph.engine:FullGraphEngine",
    config=FullGraphConfig,
    typed=True,  # blocks with relations and types, rows padded
    tasks=("node", "link"),  # link: full-batch, the positives inside each part
    factory_models=False,  # it runs shoal's own layers one at a time over the full graph
    add_arguments=options.add_arguments,
    estimate=costs.estimate,
    excluded=costs.excluded,
    demo="NeutronStar-style full-graph training: each remote dependency communicated or "
    "recomputed, as the cost model picks",
    demo_flags=("--deps", "hybrid"),
)
