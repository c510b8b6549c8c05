"""A trivial engine written outside ``shoal/engines``, to show that an engine is one folder
plus one registration line (``SHOAL_ENGINES=trivial=tests.engines.fixture_engine:SPEC``).

``trivial`` trains like ``minibatch`` with its learning rate multiplied by
``--trivial-lr-scale``; it has its own configuration, its own flag and no cost estimate (never
chosen by ``--engine auto``). The rest of its spec keeps the defaults: node classification on
untyped stores (a typed store or ``--task link`` is refused), any device, ``--model-factory``
models, no fields of its own in the epoch records, no ``shoal demo`` step.
"""

from shoal.engines.spec import EngineSpec
from tests.engines.fixture_engine.config import TrivialConfig
from tests.engines.fixture_engine.options import add_arguments

__all__ = ["SPEC"]

SPEC = EngineSpec(
    name="trivial",
    summary="minibatch with a scaled learning rate (a test fixture)",
    engine="tests.engines.fixture_engine.engine:TrivialEngine",
    config=TrivialConfig,
    add_arguments=add_arguments,
)
