"""Comparing rank-based metrics computed with different floating-point summation orders.

Another process count, thread count, kernel or CPU sums in another order, so scores agree
within a float tolerance, not bit for bit, and a prediction whose best two logits (or a
positive whose score and a negative's) are that close may flip. These helpers give the range
a metric can take when every such near-tie may go either way: a test then checks that the
other computation lands in it, and that the range is narrow (the comparison means something).
"""

from __future__ import annotations

import numpy as np
import torch

from shoal.training import TrainData
from shoal.training.inference import layerwise_inference

__all__ = ["TOL", "accuracy_bounds", "assert_within", "link_metric_bounds"]

#: Scores computed in another order differ by far less than this (float32, small models).
TOL = 1e-4


def _accuracy_range(logits: np.ndarray, labels: np.ndarray, tol: float) -> tuple[float, float]:
    if not len(labels):
        return float("nan"), float("nan")
    top = logits.max(1)
    near = (logits >= top[:, None] - 2 * tol).sum(1) > 1  # another class within reach
    right = logits.argmax(1) == labels
    n = len(labels)
    return float((right & ~near).sum() / n), float(((right & ~near) | near).sum() / n)


def accuracy_bounds(
    model: torch.nn.Module,
    data: TrainData,
    splits: tuple[str, ...],
    *,
    normalize: bool = False,
    tol: float = TOL,
) -> dict[str, tuple[float, float]]:
    """Per split, the (lowest, highest) accuracy of ``model`` when predictions whose best two
    logits lie within ``2 tol`` may flip; the logits by exact single-process inference."""
    out = {}
    for s in splits:
        nodes = np.asarray(data.split(s), np.int64)
        logits = layerwise_inference(model.eval(), data, nodes, normalize_features=normalize)
        out[s] = _accuracy_range(np.asarray(logits), np.asarray(data.labels[nodes]), tol)
    return out


def link_metric_bounds(pos: torch.Tensor, neg: torch.Tensor, k: int, tol: float = TOL):
    """The (MRR, Hits@k) ranges over every ranking of scores each within ``tol`` of these:
    a negative within ``2 tol`` of its positive may land on either side, every other one keeps
    its side."""
    d = neg.double() - pos.double()[:, None]
    best = (d > 2 * tol).sum(1).numpy() + 1.0  # every near-tie below the positive
    worst = (d >= -2 * tol).sum(1).numpy() + 1.0  # every near-tie above it
    mrr = (float(np.mean(1 / worst)), float(np.mean(1 / best)))
    return mrr, (float(np.mean(worst <= k)), float(np.mean(best <= k)))


def assert_within(
    value: float, bounds: tuple[float, float], what: object = "", max_width: float = 0.1
) -> None:
    """``value`` lies in ``bounds``, and the range is narrower than ``max_width`` (most
    predictions are away from ties, so the check can fail)."""
    lo, hi = bounds
    assert hi - lo <= max_width, (what, "too many near-ties for a meaningful check", lo, hi)
    assert lo - 1e-9 <= value <= hi + 1e-9, (what, value, lo, hi)
