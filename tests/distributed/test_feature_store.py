"""Distributed feature store: remote pulls return exactly the owner's rows (worlds 1, 2, 4)."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.distributed import CommStats, DistFeatureStore, owner_of
from tests.distributed.helpers import run_world

# 4 parts of sizes 3, 0, 4, 2 (an empty part included) over 9 nodes; F = 3.
OFFSETS = np.array([0, 3, 3, 7, 9])


def _features() -> np.ndarray:
    n = int(OFFSETS[-1])
    return (np.arange(n * 3, dtype=np.float32).reshape(n, 3) + 0.5) * np.array(
        [1.0, -1.0, 2.0], dtype=np.float32
    )


def _pull(rank: int, world: int, part_to_rank: list[int], tmp: str) -> list:
    x = _features()
    # every part's core rows in its own memory-mapped file, as the store keeps them
    local = {}
    for i in np.flatnonzero(np.asarray(part_to_rank) == rank):
        a, b = OFFSETS[i], OFFSETS[i + 1]
        path = f"{tmp}/part{i}.npy"
        np.save(path, x[a:b])
        local[int(i)] = np.load(path, mmap_mode="r")
    stats = CommStats()
    fs = DistFeatureStore(
        part_offsets=OFFSETS,
        part_to_rank=np.asarray(part_to_rank),
        rank=rank,
        world_size=world,
        local_parts=local,
        feature_dim=3,
        stats=stats,
    )
    rng = np.random.default_rng(rank)
    out = []
    for step in range(3):  # several rounds, with repeats and an empty request
        ids = rng.integers(0, 9, size=0 if step == 1 else 7 + rank)
        rows = fs.pull(ids).numpy().copy()  # the tensor shares a reused buffer
        out.append((ids, rows))
    return [out, stats.as_dict()]


@pytest.mark.parametrize(
    ("world", "part_to_rank"),
    [(1, [0, 0, 0, 0]), (2, [0, 1, 0, 1]), (4, [3, 2, 1, 0])],
)
def test_remote_pulls_return_the_owners_rows(tmp_path, world, part_to_rank):
    results = run_world(_pull, world, part_to_rank, str(tmp_path))
    x = _features()
    owner = np.asarray(part_to_rank)[owner_of(OFFSETS, np.arange(9))]
    for rank, (pulls, stats) in enumerate(results):
        n_local = n_remote = 0
        for ids, rows in pulls:
            np.testing.assert_array_equal(rows, x[ids])
            n_local += int(np.sum(owner[ids] == rank))
            n_remote += int(np.sum(owner[ids] != rank))
        assert stats["feature_rows_local"] == n_local
        assert stats["feature_rows_remote"] == n_remote
        if world == 1:
            assert stats["bytes_sent"] == 0 and stats["messages_sent"] == 0
        else:
            assert stats["rounds"] == 2 * 3  # one id round + one row round per pull
            assert stats["bytes_received"] >= n_remote * 3 * 4


def test_owner_lookup_by_binary_search():
    np.testing.assert_array_equal(owner_of(OFFSETS, np.arange(9)), [0, 0, 0, 2, 2, 2, 2, 3, 3])


def test_store_checks_its_parts(tmp_path):
    with pytest.raises(ValueError, match="exactly parts"):
        DistFeatureStore(
            part_offsets=OFFSETS,
            part_to_rank=np.array([0, 1, 0, 1]),
            rank=0,
            world_size=2,
            local_parts={0: _features()[:3]},
            feature_dim=3,
        )
