"""Edge scorers and link-prediction losses against direct formulas."""

from __future__ import annotations

import math

import pytest
import torch

from shoal.nn.linkpred import MLPScorer, build_scorer, link_loss


def test_dot_and_mlp_scorers():
    a = torch.tensor([[1.0, 2.0], [0.5, -1.0]])
    b = torch.tensor([[3.0, 1.0], [2.0, 2.0]])
    assert build_scorer("dot", 2)(a, b).tolist() == [5.0, -1.0]
    torch.manual_seed(0)
    m = MLPScorer(2, hidden=4, layers=2)
    want = m.lins[1](torch.relu(m.lins[0](a * b))).squeeze(-1)
    assert torch.allclose(m(a, b), want)
    assert m(a, b).shape == (2,)
    with pytest.raises(ValueError, match="valid names: dot, mlp"):
        build_scorer("cosine", 2)


def test_losses_by_hand():
    pos = torch.tensor([2.0, -1.0])
    neg = torch.tensor([[0.0, 1.0], [-2.0, 3.0]])
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    bce = -(math.log(sig(2)) + math.log(sig(-1)) + sum(math.log(1 - sig(x)) for x in (0, 1, -2, 3)))
    assert link_loss("bce", pos, neg).item() == pytest.approx(bce / 6, rel=1e-6)
    diffs = [2 - 0, 2 - 1, -1 + 2, -1 - 3]
    bpr = -sum(math.log(sig(d)) for d in diffs) / 4
    assert link_loss("bpr", pos, neg).item() == pytest.approx(bpr, rel=1e-6)
    margin = sum(max(0.0, 1 - d) for d in diffs) / 4
    assert link_loss("margin", pos, neg).item() == pytest.approx(margin)
    assert link_loss("bpr", pos, neg.reshape(-1)).item() == pytest.approx(bpr, rel=1e-6)
    with pytest.raises(ValueError, match="valid names: bce, bpr, margin"):
        link_loss("hinge", pos, neg)


def test_losses_push_positive_scores_up():
    pos = torch.tensor([0.3], requires_grad=True)
    neg = torch.tensor([[0.1, 0.2]], requires_grad=True)
    for name in ("bce", "bpr", "margin"):
        loss = link_loss(name, pos, neg)
        (g_pos,) = torch.autograd.grad(loss, pos)
        assert g_pos.item() < 0  # raising a positive's score lowers every loss
