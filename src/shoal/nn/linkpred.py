"""Edge scorers and link-prediction losses, with registries by name.

A scorer maps the embeddings of an edge's two end nodes to a logit: ``score(h_src, h_dst)``
with ``(n, d)`` inputs and an ``(n,)`` output. A loss maps positive and negative logits to a
scalar. Like the models, they know nothing of graphs or partitions.

- ``dot`` (:class:`DotScorer`): ``<h_u, h_v>``, no parameters (the GraphSAGE paper's
  unsupervised objective, PyG's link-prediction examples).
- ``mlp`` (:class:`MLPScorer`): an MLP on the element-wise product ``h_u * h_v`` (OGB's
  ``LinkPredictor`` baseline): ``layers - 1`` hidden layers of width ``hidden`` with ReLU and
  dropout, then one output.
- ``bce`` (default): binary cross-entropy with logits, positives labelled 1, negatives 0,
  averaged over all of them (PyG's and OGB's examples).
- ``bpr``: Bayesian personalised ranking, ``-log sigmoid(s_pos - s_neg)`` over each positive's
  negatives (Rendle et al., UAI 2009).
- ``margin``: ``max(0, margin - s_pos + s_neg)`` over each positive's negatives (margin 1.0).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["LOSSES", "SCORERS", "DotScorer", "LinkNet", "MLPScorer", "build_scorer", "link_loss"]


class DotScorer(nn.Module):
    """``<h_u, h_v>`` per edge."""

    def forward(self, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        return (h_src * h_dst).sum(dim=-1)


class MLPScorer(nn.Module):
    """An MLP on ``h_u * h_v`` (module docstring)."""

    def __init__(
        self, dim: int, *, hidden: int | None = None, layers: int = 2, dropout: float = 0.0
    ) -> None:
        super().__init__()
        if layers < 1:
            raise ValueError(f"an MLP scorer needs at least 1 layer, got {layers}")
        widths = [dim] + [hidden or dim] * (layers - 1) + [1]
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.dropout = dropout

    def forward(self, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        x = h_src * h_dst
        for lin in self.lins[:-1]:
            x = F.dropout(F.relu(lin(x)), p=self.dropout, training=self.training)
        return self.lins[-1](x).squeeze(-1)


#: Scorer names accepted by ``--scorer`` and :func:`build_scorer`.
SCORERS = {"dot": DotScorer, "mlp": MLPScorer}


def build_scorer(name: str, dim: int, **kw) -> nn.Module:
    if name not in SCORERS:
        raise ValueError(f"unknown scorer {name!r}; valid names: {', '.join(sorted(SCORERS))}")
    return DotScorer() if name == "dot" else MLPScorer(dim, **kw)


def _pairs(pos: torch.Tensor, neg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Positive logits broadcast against ``(n, K)`` negatives (``neg`` may be ``(n * K,)``)."""
    n = pos.shape[0]
    if n == 0:
        return pos.reshape(0, 1), neg.reshape(0, 1)
    return pos.reshape(n, 1), neg.reshape(n, -1)


def _bce(pos: torch.Tensor, neg: torch.Tensor, margin: float) -> torch.Tensor:
    logits = torch.cat([pos.reshape(-1), neg.reshape(-1)])
    labels = torch.cat([torch.ones_like(pos.reshape(-1)), torch.zeros_like(neg.reshape(-1))])
    return F.binary_cross_entropy_with_logits(logits, labels)


def _bpr(pos: torch.Tensor, neg: torch.Tensor, margin: float) -> torch.Tensor:
    p, q = _pairs(pos, neg)
    return -F.logsigmoid(p - q).mean()


def _margin(pos: torch.Tensor, neg: torch.Tensor, margin: float) -> torch.Tensor:
    p, q = _pairs(pos, neg)
    return F.relu(margin - p + q).mean()


#: Loss names accepted by ``--link-loss`` and :func:`link_loss`.
LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]] = {
    "bce": _bce,
    "bpr": _bpr,
    "margin": _margin,
}


def link_loss(
    name: str, pos: torch.Tensor, neg: torch.Tensor, *, margin: float = 1.0
) -> torch.Tensor:
    """The loss ``name`` of positive logits ``(n,)`` and negative logits ``(n, K)`` (or
    ``(n * K,)``, each positive's ``K`` in a row; ``bce`` accepts any negatives)."""
    if name not in LOSSES:
        raise ValueError(f"unknown link loss {name!r}; valid names: {', '.join(sorted(LOSSES))}")
    return LOSSES[name](pos, neg, margin)


class LinkNet(nn.Module):
    """An encoder (any ``encoder(x, blocks)``) and a scorer as one module: ``forward`` embeds
    a batch's nodes and scores the edges ``pos`` / ``neg`` (``(2, n)`` positions among the
    seeds), so one module holds every weight a link model trains and checkpoints."""

    def __init__(self, encoder: nn.Module, scorer: nn.Module) -> None:
        super().__init__()
        self.encoder, self.scorer = encoder, scorer

    def forward(
        self, x: torch.Tensor, blocks, pos: torch.Tensor, neg: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.encoder(x, blocks)
        return self.scorer(h[pos[0]], h[pos[1]]), self.scorer(h[neg[0]], h[neg[1]])
