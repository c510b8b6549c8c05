"""``minibatch``: synchronous mini-batch SGD with remote sampling and feature pulls (DistDGL),
for node classification (:mod:`.engine`) and link prediction (:mod:`.link`)."""

from shoal.engines.minibatch import costs
from shoal.engines.spec import EngineSpec

__all__ = ["SPEC"]

SPEC = EngineSpec(
    name="minibatch",
    summary="sync SGD with remote sampling and feature pulls (DistDGL)",
    engine="shoal.engines.minibatch.engine:MinibatchEngine",
    typed_engine="shoal.engines.minibatch.typed:TypedMinibatchEngine",
    link_engine="shoal.engines.minibatch.link:LinkMinibatchEngine",
    estimate=costs.estimate,
)
