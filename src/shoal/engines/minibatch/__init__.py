"""``minibatch``: synchronous mini-batch SGD with remote sampling and feature pulls (DistDGL),
for node classification and link prediction (:mod:`.engine`)."""

from shoal.engines.minibatch import costs, options
from shoal.engines.minibatch.config import MinibatchConfig
from shoal.engines.spec import EngineSpec

__all__ = ["SPEC", "MinibatchConfig"]

SPEC = EngineSpec(
    name="minibatch",
    summary="sync SGD with remote sampling and feature pulls (DistDGL)",
    engine="shoal.engines.minibatch.engine:MinibatchEngine",
    config=MinibatchConfig,
    tasks=("node", "link"),
    typed=True,  # fanouts per relation, every type's rows in one source
    add_arguments=options.add_arguments,
    estimate=costs.estimate,
    demo="DistDGL-style synchronous SGD: features pulled from the owning process, gradients "
    "all-reduced every step",
)
