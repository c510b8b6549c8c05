"""Numba kernels of :mod:`shoal.nn.attention` (private; numpy arrays only): the sum of a CSR's
entries' source rows weighted per head, forward and backward, without a row per entry.

Shapes: ``rowptr`` ``(n_dst + 1,)`` and ``col`` ``(entries,)`` int64 (a row may hold a column
twice), ``alpha`` ``(entries, heads)``, ``h`` ``(n_src, heads, channels)``, ``g`` (the output's
gradient) ``(n_dst, heads, channels)``, all float32 and C-contiguous.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange


@numba.njit(cache=True, parallel=True, fastmath=True)
def _wsum(rowptr, col, alpha, h, out):
    """``out[v, k] = sum_e alpha[e, k] * h[col[e], k]`` over row ``v``'s entries ``e``; on the
    CSR by column (:func:`_transpose`) with the coefficients in its order, the gradient of
    ``h`` given the output's."""
    heads, ch = h.shape[1], h.shape[2]
    for v in prange(rowptr.shape[0] - 1):
        for k in range(heads):
            for c in range(ch):
                out[v, k, c] = 0.0
        for e in range(rowptr[v], rowptr[v + 1]):
            u = col[e]
            for k in range(heads):
                a = alpha[e, k]
                for c in range(ch):
                    out[v, k, c] += a * h[u, k, c]


@numba.njit(cache=True, parallel=True, fastmath=True)
def _wsum_grad_alpha(rowptr, col, h, g, out):
    """``out[e, k] = <h[col[e], k], g[v, k]>`` for entry ``e`` of row ``v`` (a sampled
    product at the CSR's entries)."""
    heads, ch = h.shape[1], h.shape[2]
    for v in prange(rowptr.shape[0] - 1):
        for e in range(rowptr[v], rowptr[v + 1]):
            u = col[e]
            for k in range(heads):
                s = np.float32(0.0)
                for c in range(ch):
                    s += h[u, k, c] * g[v, k, c]
                out[e, k] = s


@numba.njit(cache=True)
def _transpose(rowptr, col, n_src):
    """The CSR by column: ``(tptr, entry, row)``, column ``u``'s entries ``entry[tptr[u]:
    tptr[u + 1]]`` (in row order) and their rows."""
    tptr = np.zeros(n_src + 1, np.int64)
    for e in range(col.shape[0]):
        tptr[col[e] + 1] += 1
    for u in range(n_src):
        tptr[u + 1] += tptr[u]
    fill = tptr[:-1].copy()
    entry = np.empty(col.shape[0], np.int64)
    row = np.empty(col.shape[0], np.int64)
    for v in range(rowptr.shape[0] - 1):
        for e in range(rowptr[v], rowptr[v + 1]):
            at = fill[col[e]]
            entry[at], row[at] = e, v
            fill[col[e]] = at + 1
    return tptr, entry, row


@numba.njit(cache=True, parallel=True, fastmath=True)
def _edge_softmax(rowptr, col, a_src, a_dst, slope, alpha):
    """``alpha[e, k]``: the softmax over row ``v``'s entries of ``leaky_relu(a_src[col[e], k]
    + a_dst[v, k], slope)`` (``exp(s - max) / (sum + 1e-16)``, as PyG's ``softmax``)."""
    heads = a_dst.shape[1]
    for v in prange(rowptr.shape[0] - 1):
        lo, hi = rowptr[v], rowptr[v + 1]
        for k in range(heads):
            top = -np.inf
            for e in range(lo, hi):
                s = a_src[col[e], k] + a_dst[v, k]
                s = s if s > 0 else s * slope
                alpha[e, k] = s
                top = max(top, s)
            total = np.float32(0.0)
            for e in range(lo, hi):
                x = np.exp(alpha[e, k] - top)
                alpha[e, k] = x
                total += x
            for e in range(lo, hi):
                alpha[e, k] = alpha[e, k] / (total + np.float32(1e-16))


@numba.njit(cache=True, parallel=True, fastmath=True)
def _edge_softmax_grad(rowptr, col, a_src, a_dst, slope, alpha, grad, g_raw, g_dst):
    """The gradient of :func:`_edge_softmax` at ``alpha`` given ``grad`` (``(entries,
    heads)``): per entry of the scores before the leaky ReLU (``g_raw``) and per row of
    ``a_dst`` (``g_dst``: the sum of its entries'; ``a_src``'s is ``g_raw`` summed by
    column, left to the caller)."""
    heads = a_dst.shape[1]
    for v in prange(rowptr.shape[0] - 1):
        lo, hi = rowptr[v], rowptr[v + 1]
        for k in range(heads):
            dot = np.float32(0.0)
            for e in range(lo, hi):
                dot += alpha[e, k] * grad[e, k]
            acc = np.float32(0.0)
            for e in range(lo, hi):
                gs = alpha[e, k] * (grad[e, k] - dot)
                if a_src[col[e], k] + a_dst[v, k] <= 0:
                    gs *= slope
                g_raw[e, k] = gs
                acc += gs
            g_dst[v, k] = acc
