"""A trivial engine written outside ``shoal/engines``, to show that an engine is one folder
plus one registration line (``SHOAL_ENGINES=trivial=tests.engines.fixture_engine:SPEC``).

``trivial`` writes its own step from the ``Engine`` interface (local synchronous SGD inside
each rank's parts, its learning rate multiplied by ``--trivial-lr-scale``) and trains both
tasks on untyped and typed stores; it has its own configuration, its own flag and no cost
estimate (never chosen by ``--engine auto``). The rest of its spec keeps the defaults: any
device, ``--model-factory`` models, no fields of its own in the epoch records, no ``shoal
demo`` step.
"""

from shoal.engines.spec import EngineSpec
from tests.engines.fixture_engine.config import TrivialConfig
from tests.engines.fixture_engine.options import add_arguments

__all__ = ["SPEC"]

SPEC = EngineSpec(
    name="trivial",
    summary="local synchronous SGD inside each rank's parts (a test fixture)",
    engine="tests.engines.fixture_engine.engine:TrivialEngine",
    config=TrivialConfig,
    tasks=("node", "link"),
    typed=True,
    add_arguments=add_arguments,
)
