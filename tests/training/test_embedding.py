"""On-disk node embeddings and their sparse optimizers against dense torch references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shoal.training.embedding import NodeEmbedding, SparseAdagrad, SparseAdam


def test_table_is_a_file_initialised_in_bounds_and_reopened(tmp_path):
    e = NodeEmbedding(tmp_path / "emb", 1000, 8, seed=3)
    w = np.array(e.weight)
    assert isinstance(e.weight, np.memmap) and np.abs(w).max() <= 1 / np.sqrt(8)
    assert np.array_equal(np.array(NodeEmbedding(tmp_path / "emb", 1000, 8, seed=9).weight), w)
    assert np.array_equal(np.array(NodeEmbedding(tmp_path / "other", 1000, 8, seed=3).weight), w)
    with pytest.raises(ValueError, match="expected"):
        NodeEmbedding(tmp_path / "emb", 1000, 4)


def test_sparse_adam_touches_only_the_batch_rows(tmp_path):
    e = NodeEmbedding(tmp_path, 50, 4)
    opt = SparseAdam(e, lr=0.1)
    before = np.array(e.weight)
    ids = np.array([7, 3, 40])
    x = e.gather(ids)
    (x.sum() * 2).backward()
    opt.step(ids, x.grad)
    after = np.array(e.weight)
    changed = np.flatnonzero(np.abs(after - before).sum(1) > 0)
    assert changed.tolist() == [3, 7, 40]
    assert (
        np.array(opt.steps)[[3, 7, 40], 0].tolist() == [1, 1, 1] and np.array(opt.steps).sum() == 3
    )


def test_sparse_adam_equals_torch_sparse_adam_when_every_row_is_updated(tmp_path):
    rng = np.random.default_rng(0)
    e = NodeEmbedding(tmp_path, 6, 3)
    ref = torch.nn.Parameter(torch.from_numpy(np.array(e.weight)))
    opt, ref_opt = SparseAdam(e, lr=0.05), torch.optim.SparseAdam([ref], lr=0.05)
    target = torch.from_numpy(rng.normal(size=(6, 3)).astype(np.float32))
    for _ in range(5):
        ids = rng.permutation(6)  # every row, in a shuffled order
        x = e.gather(ids)
        ((x - target[ids]) ** 2).sum().backward()
        opt.step(ids, x.grad)
        emb = torch.nn.functional.embedding(torch.from_numpy(ids), ref, sparse=True)
        ref_opt.zero_grad()
        ((emb - target[ids]) ** 2).sum().backward()
        ref_opt.step()
    assert np.allclose(np.array(e.weight), ref.detach().numpy(), atol=1e-6)


def test_sparse_adagrad_equals_dense_adagrad_and_sums_repeats(tmp_path):
    e = NodeEmbedding(tmp_path, 5, 2)
    ref = torch.nn.Parameter(torch.from_numpy(np.array(e.weight)))
    opt = SparseAdagrad(e, lr=0.1)
    ref_opt = torch.optim.Adagrad([ref], lr=0.1, eps=1e-10)
    ids = np.array([1, 4, 1])  # a repeated row: its gradients add up
    for _ in range(3):
        x = e.gather(ids)
        (x**2).sum().backward()
        opt.step(ids, x.grad)
        ref_opt.zero_grad()
        (ref[torch.from_numpy(ids)] ** 2).sum().backward()
        ref_opt.step()
    assert np.allclose(np.array(e.weight), ref.detach().numpy(), atol=1e-6)
    assert np.array_equal(np.array(e.weight)[[0, 2, 3]], ref.detach().numpy()[[0, 2, 3]])
