"""The engine tests' tiny stores, for the distributed-layer tests too."""

from tests.engines.conftest import make_store

__all__ = ["make_store"]
