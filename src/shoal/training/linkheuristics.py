"""Heuristic link scores, the baselines a learned link predictor must beat.

For a pair ``(u, v)`` with neighbour sets ``N(u)``, ``N(v)`` (rows of the in-neighbour CSR of
the message-passing graph; for an undirected graph, the neighbours):

- common neighbours: ``CN(u, v) = |N(u) & N(v)|``;
- Adamic-Adar (Adamic & Adar, Social Networks 2003): ``AA(u, v) = sum over w in N(u) & N(v)
  of 1 / log(deg(w))`` (a neighbour of degree 1 cannot be common to two nodes but a repeated
  edge can make it so; its weight is taken as ``1 / log(2)``).

Rows are read from the CSR (a memory map is fine) pair by pair and intersected with a merge
when both are sorted (shoal's CSRs are), else through a sort of the shorter row; repeated
entries of a row count once. Memory: two rows.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["HEURISTICS", "heuristic_ranking_scores", "heuristic_scores"]

HEURISTICS = ("common-neighbours", "adamic-adar")


@numba.njit(cache=True)
def _sorted_unique(a):
    b = np.sort(a)
    if b.shape[0] == 0:
        return b
    keep = np.ones(b.shape[0], np.bool_)
    for i in range(1, b.shape[0]):
        keep[i] = b[i] != b[i - 1]
    return b[keep]


@numba.njit(cache=True)
def _scores(indptr, indices, pairs, weighted, out):
    n_rows = indptr.shape[0] - 1
    for k in range(pairs.shape[0]):
        u, v = pairs[k, 0], pairs[k, 1]
        if u >= n_rows or v >= n_rows:
            out[k] = 0.0
            continue
        a = _sorted_unique(indices[indptr[u] : indptr[u + 1]].astype(np.int64))
        b = _sorted_unique(indices[indptr[v] : indptr[v + 1]].astype(np.int64))
        i, j, s = 0, 0, 0.0
        while i < a.shape[0] and j < b.shape[0]:
            if a[i] < b[j]:
                i += 1
            elif a[i] > b[j]:
                j += 1
            else:
                w = a[i]
                if weighted:
                    d = indptr[w + 1] - indptr[w] if w < n_rows else 0
                    s += 1.0 / np.log(max(d, 2))
                else:
                    s += 1.0
                i += 1
                j += 1
        out[k] = s


def heuristic_scores(
    indptr: np.ndarray, indices: np.ndarray, pairs: np.ndarray, how: str = "adamic-adar"
) -> np.ndarray:
    """``(k,)`` float64 scores of the ``(k, 2)`` ``pairs`` (module docstring)."""
    if how not in HEURISTICS:
        raise ValueError(f"unknown heuristic {how!r}; valid names: {', '.join(HEURISTICS)}")
    p = np.ascontiguousarray(np.asarray(pairs, dtype=np.int64).reshape(-1, 2))
    out = np.zeros(len(p), np.float64)
    if len(p):
        _scores(np.asarray(indptr, np.int64), indices, p, how == "adamic-adar", out)
    return out


def heuristic_ranking_scores(
    indptr: np.ndarray,
    indices: np.ndarray,
    pos: np.ndarray,
    neg: np.ndarray,
    how: str = "adamic-adar",
    chunk: int = 1 << 14,
) -> tuple[np.ndarray, np.ndarray]:
    """The heuristic's scores of the held-out positives ``pos`` ``(n, 2)`` and of each one's
    negative candidates ``neg`` ``(n, K)`` (pairs ``(pos[i, 0], neg[i, j])``), as a learned
    scorer ranks them (:func:`shoal.training.linkmetrics.mrr_hits`); ``chunk`` positives at
    a time, so memory is that chunk's pairs."""
    pos, neg = np.asarray(pos, np.int64), np.asarray(neg, np.int64)
    sp, sq = np.zeros(len(pos)), np.zeros(neg.shape)
    for s in range(0, len(pos), chunk):
        p, q = pos[s : s + chunk], neg[s : s + chunk]
        sp[s : s + chunk] = heuristic_scores(indptr, indices, p, how)
        pairs = np.stack([np.repeat(p[:, 0], q.shape[1]), q.ravel()], axis=1)
        sq[s : s + chunk] = heuristic_scores(indptr, indices, pairs, how).reshape(q.shape)
    return sp, sq
