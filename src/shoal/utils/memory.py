"""Peak resident memory of this process (for benchmarks and ``--json`` outputs)."""

from __future__ import annotations

import resource
import sys

__all__ = ["peak_rss_bytes"]


def peak_rss_bytes() -> int:
    """Peak RSS of the current process in bytes (``ru_maxrss``)."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)
