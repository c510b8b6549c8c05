"""Thread counts of torch and numba."""

from __future__ import annotations

import os

__all__ = ["available_cores", "set_threads", "threads_per_process"]


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's or ``taskset``'s
    share, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def threads_per_process(processes: int) -> int:
    """Each of ``processes`` processes sharing this machine's cores: its even share, at least
    one (so the processes together never run more threads than there are cores)."""
    return max(1, available_cores() // max(1, processes))


def set_threads(threads: int | None) -> None:
    """Set torch's and numba's thread counts (None: leave them)."""
    if threads is None:
        return
    import numba
    import torch

    torch.set_num_threads(threads)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
