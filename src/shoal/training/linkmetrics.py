"""Link-prediction metrics as OGB computes them: MRR and Hits@K against sampled negatives.

Each positive edge is ranked among its own ``K`` negative candidates (``ogbl-citation2``'s
protocol): with ``s`` the positive's score and ``n_j`` the negatives',

    optimistic  = #{j : n_j >  s},   pessimistic = #{j : n_j >= s},
    rank        = (optimistic + pessimistic) / 2 + 1,

so ties count half (a constant scorer ranks every positive at ``K / 2 + 1``, not at 1);
``MRR = mean(1 / rank)`` and ``Hits@k = mean(rank <= k)``. :func:`hits_at_k_global` is the
other OGB protocol (``ogbl-collab``, ``ogbl-ddi``): the fraction of positives scored above the
``k``-th highest of one shared set of negatives.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["hits_at_k_global", "link_ranks", "mrr_hits"]


def _as_numpy(a: np.ndarray | torch.Tensor) -> np.ndarray:
    return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def link_ranks(pos: np.ndarray | torch.Tensor, neg: np.ndarray | torch.Tensor) -> np.ndarray:
    """The tie-averaged rank (1 = best) of each positive among its negatives.

    Args:
        pos: ``(n,)`` scores of the positive edges.
        neg: ``(n, K)`` scores of each positive's negative candidates.
    """
    p, q = _as_numpy(pos).astype(np.float64), _as_numpy(neg).astype(np.float64)
    if q.ndim != 2 or p.ndim != 1 or q.shape[0] != p.shape[0]:
        raise ValueError(f"need pos (n,) and neg (n, K), got {p.shape} and {q.shape}")
    if np.isnan(p).any() or np.isnan(q).any():
        raise ValueError("scores contain NaN: the ranking is undefined")
    optimistic = (q > p[:, None]).sum(axis=1)
    pessimistic = (q >= p[:, None]).sum(axis=1)
    return 0.5 * (optimistic + pessimistic) + 1.0


def mrr_hits(
    pos: np.ndarray | torch.Tensor,
    neg: np.ndarray | torch.Tensor,
    ks: tuple[int, ...] = (1, 10, 50, 100),
) -> dict[str, float]:
    """``{"mrr": ..., "hits@k": ...}`` of the tie-averaged ranks (module docstring); an empty
    input gives NaN (nothing to rank), never 0."""
    r = link_ranks(pos, neg)
    if r.size == 0:
        return {"mrr": float("nan"), **{f"hits@{k}": float("nan") for k in ks}}
    return {"mrr": float(np.mean(1.0 / r)), **{f"hits@{k}": float(np.mean(r <= k)) for k in ks}}


def hits_at_k_global(
    pos: np.ndarray | torch.Tensor, neg: np.ndarray | torch.Tensor, k: int
) -> float:
    """OGB's Hits@K with one shared set of negatives: the fraction of positives scored
    strictly above the ``k``-th highest negative score (1.0 when there are fewer than ``k``
    negatives, as OGB's evaluator)."""
    p, q = _as_numpy(pos).ravel(), _as_numpy(neg).ravel()
    if p.size == 0:
        return float("nan")
    if q.size < k:
        return 1.0
    kth = np.partition(q, q.size - k)[q.size - k]
    return float(np.mean(p > kth))
