"""The device sampler: the host sampler's batches, bit for bit, drawn with torch operations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.sample.device import DeviceSampler
from shoal.sample.sampler import NeighborSampler

CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])


def _csr(rows: int, degrees: np.ndarray, num_nodes: int, rng) -> tuple[np.ndarray, np.ndarray]:
    indptr = np.zeros(rows + 1, np.int64)
    np.cumsum(degrees, out=indptr[1:])
    return indptr, rng.integers(0, num_nodes, int(indptr[-1]))


def _assert_same(host, dev) -> None:
    assert np.array_equal(host.n_id, dev.n_id.cpu().numpy())
    assert host.num_seeds == dev.num_seeds and len(host.blocks) == len(dev.blocks)
    for a, b in zip(host.blocks, dev.blocks, strict=True):
        assert (a.num_src, a.num_dst) == (b.num_src, b.num_dst)
        assert torch.equal(a.edge_index, b.edge_index.cpu())
        assert torch.equal(a.rowptr, b.rowptr.cpu())
        assert torch.equal(a.deg_src, b.deg_src.cpu())


def test_a_hand_built_graph_draws_what_the_host_draws():
    """Node 0 has 5 in-neighbours (a self-loop and a duplicate among them), node 1 one,
    node 2 none (isolated), node 3 is a halo id past the CSR's rows: fanout 2 draws two
    distinct positions of node 0's row, takes node 1's only neighbour, nothing for 2 and 3."""
    indptr = np.array([0, 5, 6, 6])
    indices = np.array([0, 1, 1, 2, 3, 0])
    host = NeighborSampler(indptr, indices, [2], num_nodes=4)
    dev = DeviceSampler(indptr, indices, [2], num_nodes=4)
    for s in range(20):
        a, b = host.sample(np.array([0, 1, 2, 3]), s), dev.sample(np.array([0, 1, 2, 3]), s)
        _assert_same(a, b)
        rowptr = b.blocks[0].rowptr.tolist()
        assert rowptr == [0, 2, 3, 3, 3]
    # 20 seeds draw more than one pair of node 0's positions
    pairs = {
        tuple(dev.sample(np.array([0]), s).blocks[0].edge_index[0].tolist()) for s in range(20)
    }
    assert len(pairs) > 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("fanouts", "max_degree"),
    [((10, 5), 30), ((15, 10, 5), 40), ((1,), 4), ((-1, 3), 8), ((70, 2), 200), ((100,), 90)],
)
def test_random_graphs_equal_the_host_sampler(device, fanouts, max_degree):
    """Floyd's draws (fanouts up to 64), selection sampling (above), whole rows (-1 and
    degrees below the fanout), halo ids without rows, duplicates and self-loops: every batch
    equals the host sampler's for the same seed."""
    rng = np.random.default_rng(len(fanouts) * 1000 + max_degree)
    num_nodes = 800
    rows = num_nodes - 7  # the last 7 ids have no rows
    indptr, indices = _csr(rows, rng.integers(0, max_degree, rows), num_nodes, rng)
    host = NeighborSampler(indptr, indices, fanouts, num_nodes=num_nodes)
    dev = DeviceSampler(indptr, indices, fanouts, num_nodes=num_nodes, device=device)
    for b in range(4):
        seeds = rng.choice(num_nodes, 64, replace=False)
        _assert_same(host.sample(seeds, 77 + b), dev.sample(seeds, 77 + b))


def test_degrees_given_for_halo_ids_are_kept():
    indptr, indices = np.array([0, 1, 2]), np.array([1, 2])
    deg = np.array([1, 1, 9], np.float32)
    mb = DeviceSampler(indptr, indices, [2], num_nodes=3, degrees=deg).sample(np.array([1]), 0)
    assert mb.n_id.tolist() == [1, 2] and mb.blocks[0].deg_src.tolist() == [1.0, 9.0]


def test_no_seeds_give_an_empty_batch():
    indptr, indices = np.array([0, 1, 2]), np.array([1, 0])
    mb = DeviceSampler(indptr, indices, [2, 2]).sample(np.empty(0, np.int64), 3)
    assert mb.n_id.numel() == 0 and all(b.num_edges == 0 for b in mb.blocks)


def test_bad_seeds_are_named():
    dev = DeviceSampler(np.array([0, 1, 2]), np.array([1, 0]), [2])
    with pytest.raises(ValueError, match="seed node 5 is out of range"):
        dev.sample(np.array([0, 5]), 0)
    with pytest.raises(ValueError, match="unique"):
        dev.sample(np.array([1, 1]), 0)
    with pytest.raises(ValueError, match="num_nodes"):
        DeviceSampler(np.array([0, 1, 2]), np.array([1, 0]), [2], num_nodes=1)


def test_its_copy_of_the_graph_is_counted():
    indptr, indices = np.array([0, 1, 3]), np.array([1, 0, 1])
    dev = DeviceSampler(indptr, indices, [2])
    assert dev.indices.dtype == torch.int32
    held = dev.indptr.nbytes + dev.indices.nbytes + dev.degrees.nbytes
    assert DeviceSampler.nbytes(2, 3, 2) == held
