"""The store's format identity, written to and checked against ``meta.json`` (``docs/store.md``)."""

from __future__ import annotations

__all__ = ["STORE_FIX", "STORE_FORMAT", "STORE_FORMAT_VERSION", "STORE_TYPED_FORMAT_VERSION"]

#: The ``format`` field of a store's ``meta.json``.
STORE_FORMAT = "shoal-store"
#: The ``format_version`` this shoal writes and reads.
STORE_FORMAT_VERSION = 1
#: The ``format_version`` of a store of a typed graph (node types, relations per edge,
#: features per type); a reader of version 1 only refuses it rather than misread it.
STORE_TYPED_FORMAT_VERSION = 2
#: How to make a store, for error messages.
STORE_FIX = "build one with `shoal store build GRAPH_DIR ASSIGNMENT_DIR --out STORE`"
