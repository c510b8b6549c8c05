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
    typed_engine="shoal.engines.fullgraph.engine:FullGraphEngine",
    config=FullGraphConfig,
    add_arguments=options.add_arguments,
    estimate=costs.estimate,
    excluded=costs.excluded,
)
