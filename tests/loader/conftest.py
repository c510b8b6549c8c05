"""The engine tests' tiny stores, for the loader tests too."""

from tests.engines.conftest import make_store

__all__ = ["make_store"]
