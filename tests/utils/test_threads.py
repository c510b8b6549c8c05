"""Thread counts: each process's share of the machine's cores."""

from __future__ import annotations

import os

import pytest

from shoal.utils import threads as T


@pytest.mark.parametrize(
    ("cores", "processes", "want"),
    [(2, 1, 2), (2, 2, 1), (2, 3, 1), (16, 2, 8), (16, 3, 5), (8, 0, 8), (1, 4, 1)],
)
def test_threads_per_process_is_the_even_share(monkeypatch, cores, processes, want):
    monkeypatch.setattr(T, "available_cores", lambda: cores)
    assert T.threads_per_process(processes) == want
    assert T.threads_per_process(processes) * max(processes, 1) <= max(cores, max(processes, 1))


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux only")
def test_available_cores_follows_the_affinity(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5})
    assert T.available_cores() == 3


def test_set_threads_sets_torch_and_numba():
    import numba
    import torch

    before = (torch.get_num_threads(), numba.get_num_threads())
    try:
        T.set_threads(1)
        assert (torch.get_num_threads(), numba.get_num_threads()) == (1, 1)
        T.set_threads(None)  # leaves them
        assert (torch.get_num_threads(), numba.get_num_threads()) == (1, 1)
    finally:
        torch.set_num_threads(before[0])
        numba.set_num_threads(before[1])
