"""The runtime and the shared process-group helper: worlds of 1, 2 and 4, failing ranks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist

from shoal.distributed import CommStats, DistConfig, exchange, process_group
from tests.distributed.helpers import WorldFailed, run_world


def _sum_ranks(rank: int, world: int) -> tuple[int, int, float, list]:
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return rank, dist.get_world_size(), float(t.item()), _exchange_rows(rank, world)


@pytest.mark.parametrize("world", [1, 4])
def test_world_runs_all_reduces_and_exchanges(world):
    """Worlds of 1 and 4 (2 is covered by the failing-rank and engine tests)."""
    out = run_world(_sum_ranks, world)
    expect = sum(range(world))
    assert [o[:3] for o in out] == [(r, world, float(expect)) for r in range(world)]
    for r in range(world):
        got = out[r][3]
        counts, rows = got[:world], got[world:]
        assert counts == [0 if s == r else r + 1 for s in range(world)]
        assert rows == [(s + 1) * 10 + r for s in range(world) if s != r for _ in range(r + 1)]


def _raise_on_rank1(rank: int, world: int) -> None:
    if rank == 1:
        raise RuntimeError("boom from rank 1")
    dist.barrier()  # would hang forever without failure handling


def test_failing_rank_surfaces_its_error_and_does_not_hang():
    with pytest.raises(WorldFailed) as info:
        run_world(_raise_on_rank1, 2, timeout=60)
    assert info.value.rank == 1
    assert "boom from rank 1" in str(info.value)


def _exchange_rows(rank: int, world: int) -> list[list[int]]:
    # rank r sends (r + 1) * 10 + d repeated d + 1 times to every d != r
    counts = np.array([0 if d == rank else d + 1 for d in range(world)], dtype=np.int64)
    send = np.concatenate(
        [np.full(c, (rank + 1) * 10 + d, dtype=np.int64) for d, c in enumerate(counts)]
    )
    stats = CommStats()
    recv, recv_counts = exchange(send, counts, stats)
    assert stats.messages_sent == world - 1
    assert stats.bytes_sent == int(counts.sum()) * 8 + 8 * (world - 1)
    return [int(c) for c in recv_counts] + recv.tolist()


def test_exchange_rejects_rows_to_self():
    with process_group(DistConfig()), pytest.raises(ValueError, match="stay local"):
        exchange(np.zeros(1, dtype=np.int64), np.array([1]))


def test_process_group_single_process_and_teardown():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="inside"):
        with process_group() as ctx:
            assert ctx.rank == 0 and ctx.world_size == 1 and ctx.backend == "gloo"
            raise RuntimeError("inside")
    assert not dist.is_initialized()


def test_config_validation():
    with pytest.raises(ValueError):
        DistConfig(backend="mpi")
    with pytest.raises(ValueError):
        DistConfig(timeout_s=0)
