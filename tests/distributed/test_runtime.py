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


def _ask_and_answer(rank: int, world: int) -> tuple[list[int], list[int], int]:
    """Rank r asks every other rank d for d + 1 ids; the answers come back in one all-to-all
    whose counts both sides know (``recv_counts``): the asked ids times 10, in order."""
    counts = np.array([0 if d == rank else d + 1 for d in range(world)], dtype=np.int64)
    ids = np.concatenate([np.arange(c, dtype=np.int64) + 100 * d for d, c in enumerate(counts)])
    stats = CommStats()
    asked, asked_counts = exchange(ids, counts, stats)
    rounds = stats.rounds
    answers, got = exchange(asked.numpy() * 10, asked_counts, stats, recv_counts=counts)
    return answers.tolist(), got.tolist(), stats.rounds - rounds


@pytest.mark.parametrize("world", [2, 3])
def test_an_answer_whose_counts_are_known_comes_back_in_order(world):
    for rank, (answers, got, rounds) in enumerate(run_world(_ask_and_answer, world)):
        expect = [10 * (100 * d + j) for d in range(world) if d != rank for j in range(d + 1)]
        assert answers == expect and rounds == 1
        assert got == [0 if d == rank else d + 1 for d in range(world)]


def test_exchange_rejects_rows_to_self():
    with process_group(DistConfig()), pytest.raises(ValueError, match="stay local"):
        exchange(np.zeros(1, dtype=np.int64), np.array([1]))
    with process_group(DistConfig()), pytest.raises(ValueError, match="recv_counts"):
        exchange(np.zeros(0, dtype=np.int64), np.array([0]), recv_counts=np.array([0, 1]))


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
    with pytest.raises(ValueError, match="device"):
        DistConfig(device="gpu")


def test_hand_made_context_without_a_device_is_on_the_cpu():
    from shoal.distributed import DistContext

    ctx = DistContext(rank=0, world_size=1, local_rank=0, backend="gloo", device=None)
    assert ctx.device == torch.device("cpu") and ctx.model_group is None


def _open_devices(rank: int, world: int) -> tuple[str, object]:
    from shoal.distributed.runtime import _open_device, nccl_group
    from shoal.errors import ShoalInputError

    group = nccl_group(torch.device("cpu"), [0, 1], timeout_s=30.0)  # host tensors: no NCCL
    try:
        _open_device("cpu" if rank == 0 else "cuda", rank, world)
        return "ok", group
    except ShoalInputError as e:
        return str(e), group


@pytest.mark.skipif(torch.cuda.is_available(), reason="rank 1 must fail to open cuda")
def test_a_rank_that_cannot_open_its_device_fails_every_rank():
    """Rank 1 asks for a GPU this machine lacks: it raises its own error and rank 0, which
    opened the CPU, raises too instead of waiting in the next collective."""
    (msg0, g0), (msg1, g1) = run_world(_open_devices, 2)
    assert "another rank could not open its --device" in msg0
    assert "torch.cuda.is_available() is False" in msg1
    assert g0 is None and g1 is None
