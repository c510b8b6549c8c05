"""shoal: train graph neural networks on graphs larger than one machine's memory.

The pipeline (see ``docs/``): stream the edge list from disk -> partition with O(V) memory ->
write a store of parts -> plan -> train with a distributed engine -> report.
"""

from shoal.errors import ShoalError, ShoalInputError

__version__ = "0.1.0"
__all__ = ["ShoalError", "ShoalInputError", "__version__"]
