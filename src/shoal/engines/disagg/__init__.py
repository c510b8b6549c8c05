"""``disagg``: batch preparation disaggregated from model computation (Armada)."""

from shoal.engines.disagg import costs, options
from shoal.engines.disagg.config import DisaggConfig
from shoal.engines.spec import EngineSpec

__all__ = ["SPEC", "DisaggConfig"]

SPEC = EngineSpec(
    name="disagg",
    summary="batch workers sample and load rows for compute workers that cache them (Armada)",
    engine="shoal.engines.disagg.engine:DisaggEngine",
    typed_engine="shoal.engines.disagg.engine:DisaggEngine",
    config=DisaggConfig,
    add_arguments=options.add_arguments,
    estimate=costs.estimate,
    excluded=costs.excluded,
)
