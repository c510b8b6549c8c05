"""Numba kernels of :mod:`shoal.nn.attention` (private; numpy arrays only): the sum of a CSR's
entries' source rows weighted per head, forward and backward, without a row per entry.

Shapes: ``rowptr`` ``(n_dst + 1,)`` and ``col`` ``(entries,)`` int64 (a row may hold a column
twice), ``alpha`` ``(entries, heads)``, all float32 and C-contiguous. Rows of ``heads``
blocks of ``ch`` channels, and the scores, are read from (and their gradients written to)
C-contiguous 2-D arrays at a column offset: a block of a wider array, e.g. one projection
``[h | a_src | a_dst]`` (:class:`shoal.nn.attention._ProjectedAttention`), stays in place and
the inner loops still run over contiguous channels.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange


@numba.njit(cache=True, parallel=True, fastmath=True)
def _wsum(rowptr, col, alpha, h, hoff, ch, out):
    """``out[v, k*ch + c] = sum_e alpha[e, k] * h[col[e], hoff + k*ch + c]`` over row ``v``'s
    entries ``e``; on the CSR by column (:func:`_transpose`) with the coefficients in its
    order, the gradient of ``h`` given the output's."""
    heads = alpha.shape[1]
    for v in prange(rowptr.shape[0] - 1):
        o = out[v]
        o[:] = 0.0
        for e in range(rowptr[v], rowptr[v + 1]):
            hu = h[col[e], hoff : hoff + heads * ch]
            for k in range(heads):
                a = alpha[e, k]
                ok, hk = o[k * ch : (k + 1) * ch], hu[k * ch : (k + 1) * ch]
                for c in range(ch):  # (views indexed from 0: no wraparound, vectorised)
                    ok[c] += a * hk[c]


@numba.njit(cache=True, parallel=True, fastmath=True)
def _wsum_grad_alpha(rowptr, col, h, hoff, ch, g, out):
    """``out[e, k] = <h[col[e], hoff + k-th block], g[v, k-th block]>`` for entry ``e`` of row
    ``v`` (a sampled product at the CSR's entries)."""
    heads = out.shape[1]
    for v in prange(rowptr.shape[0] - 1):
        gv = g[v]
        for e in range(rowptr[v], rowptr[v + 1]):
            hu = h[col[e], hoff : hoff + heads * ch]
            for k in range(heads):
                hk, gk = hu[k * ch : (k + 1) * ch], gv[k * ch : (k + 1) * ch]
                s = np.float32(0.0)
                for c in range(ch):
                    s += hk[c] * gk[c]
                out[e, k] = s


@numba.njit(cache=True, parallel=True, fastmath=True)
def _attend_grad_src(tptr, entry, row, alpha, g_raw, g, ch, g_y, hoff, soff):
    """The sources' gradients of an attention layer, on the CSR by column (:func:`_transpose`)
    with the coefficients read in their own order: per source row ``u``, its rows' ``g_y[u,
    hoff + k-th block] = sum_j alpha[e_j, k] g[row_j, k-th block]`` (the weighted sum's) and
    its scores' ``g_y[u, soff + k] = sum_j g_raw[e_j, k]`` (from :func:`_edge_softmax_grad`)
    over its entries ``e_j``."""
    heads = alpha.shape[1]
    for u in prange(tptr.shape[0] - 1):
        gh, gs = g_y[u, hoff : hoff + heads * ch], g_y[u, soff : soff + heads]
        gh[:] = 0.0
        gs[:] = 0.0
        for j in range(tptr[u], tptr[u + 1]):
            e, gv = entry[j], g[row[j]]
            for k in range(heads):
                a = alpha[e, k]
                gs[k] += g_raw[e, k]
                ghk, gk = gh[k * ch : (k + 1) * ch], gv[k * ch : (k + 1) * ch]
                for c in range(ch):
                    ghk[c] += a * gk[c]


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
def _edge_softmax(rowptr, col, a_src, soff, a_dst, doff, slope, alpha):
    """``alpha[e, k]``: the softmax over row ``v``'s entries of ``leaky_relu(a_src[col[e], soff
    + k] + a_dst[v, doff + k], slope)`` (``exp(s - max) / (sum + 1e-16)``, as PyG's
    ``softmax``)."""
    heads = alpha.shape[1]
    for v in prange(rowptr.shape[0] - 1):
        lo, hi = rowptr[v], rowptr[v + 1]
        for k in range(heads):
            top = -np.inf
            d = a_dst[v, doff + k]
            for e in range(lo, hi):
                s = a_src[col[e], soff + k] + d
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
def _edge_softmax_grad(
    rowptr, col, a_src, soff, a_dst, doff, slope, alpha, grad, g_raw, g_dst, goff
):
    """The gradient of :func:`_edge_softmax` at ``alpha`` given ``grad`` (``(entries,
    heads)``): per entry of the scores before the leaky ReLU (``g_raw``) and per row of
    ``a_dst`` (``g_dst[v, goff + k]``: the sum of its entries'; ``a_src``'s is ``g_raw`` summed
    by column, left to the caller)."""
    heads = alpha.shape[1]
    for v in prange(rowptr.shape[0] - 1):
        lo, hi = rowptr[v], rowptr[v + 1]
        for k in range(heads):
            d = a_dst[v, doff + k]
            dot = np.float32(0.0)
            for e in range(lo, hi):
                dot += alpha[e, k] * grad[e, k]
            acc = np.float32(0.0)
            for e in range(lo, hi):
                gs = alpha[e, k] * (grad[e, k] - dot)
                if a_src[col[e], soff + k] + d <= 0:
                    gs *= slope
                g_raw[e, k] = gs
                acc += gs
            g_dst[v, goff + k] = acc
