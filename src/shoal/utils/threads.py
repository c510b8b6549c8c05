"""Thread counts of torch and numba."""

from __future__ import annotations

__all__ = ["set_threads"]


def set_threads(threads: int | None) -> None:
    """Set torch's and numba's thread counts (None: leave them)."""
    if threads is None:
        return
    import numba
    import torch

    torch.set_num_threads(threads)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
