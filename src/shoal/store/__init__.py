"""The partitioned store: writer (``build_store``), reader (``Store``, ``Partition``), verify.

Layout and ID spaces are specified in ``docs/store.md``.
"""

from shoal.store.reader import Partition, Store

__all__ = ["Partition", "Store", "build_store"]


def __getattr__(name: str):
    if name == "build_store":
        from shoal.store.writer import build_store

        return build_store
    raise AttributeError(name)
