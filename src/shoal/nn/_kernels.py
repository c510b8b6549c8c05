"""Numba kernels of the models (private; numpy arrays only): a fast dropout.

torch's CPU dropout draws one Bernoulli sample per element through a generic path that costs
tens of nanoseconds per element; on sampled blocks (a hundred thousand input rows) that makes
it the largest single cost of a training step (docs/measurements.md#training-step).
Here one SplitMix64 draw (Steele, Lea & Flood, OOPSLA 2014) gives four 16-bit uniforms, rows
run in parallel, each row with its own stream keyed by (seed, row key): the mask depends on the
seed only, not on the number of threads. A row's key is its position, or, when ``ids`` is not
empty, ``ids[row]`` (a global node id: keyed dropout, :mod:`shoal.nn.dropout`).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@numba.njit(cache=True, inline="always")
def _mix64(z):
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True, inline="always")
def _row_state(seed, ids, i):
    """The first state of row ``i``'s stream: keyed by ``ids[i]``, or by ``i`` when ``ids``
    is empty."""
    key = np.uint64(ids[i]) if ids.shape[0] else np.uint64(i)
    return _mix64(seed ^ _mix64(key + _GOLDEN))


@numba.njit(cache=True, parallel=True)
def _dropout_apply(x, seed, threshold, scale, ids, out):
    """out = x * mask * scale, mask[i, j] = (16-bit uniform of (seed, key of row i, j) >=
    threshold), the row key ``ids[i]`` (or ``i`` when ``ids`` is empty).

    The same call on the output gradient is the backward pass (the mask is regenerated from
    the seed instead of stored). Branch-free inner loop over groups of four columns.
    """
    n, f = x.shape
    nb = f // 4
    f4 = 4 * nb
    zero = np.float32(0.0)
    for i in prange(n):
        row = _row_state(seed, ids, i)
        # block k's state is row + (k + 1) * golden (SplitMix64's k-th step), each computed
        # on its own so that the loop vectorises (the same bits as stepping the state)
        for k in range(nb):
            bits = _mix64(row + np.uint64(k + 1) * _GOLDEN)
            for q in range(4):
                u = (bits >> np.uint64(16 * q)) & np.uint64(0xFFFF)
                out[i, 4 * k + q] = x[i, 4 * k + q] * (scale if u >= threshold else zero)
        if f4 < f:
            bits = _mix64(row + np.uint64(nb + 1) * _GOLDEN)
            for q in range(f - f4):
                u = (bits >> np.uint64(16 * q)) & np.uint64(0xFFFF)
                out[i, f4 + q] = x[i, f4 + q] * (scale if u >= threshold else zero)


@numba.njit(cache=True, parallel=True)
def _relu_dropout(x, seed, threshold, scale, ids, out):
    """out = max(x, 0) * mask * scale (mask as in :func:`_dropout_apply`)."""
    n, f = x.shape
    nb = f // 4
    f4 = 4 * nb
    zero = np.float32(0.0)
    for i in prange(n):
        row = _row_state(seed, ids, i)
        for k in range(nb):  # blocks' states computed on their own (_dropout_apply)
            bits = _mix64(row + np.uint64(k + 1) * _GOLDEN)
            for q in range(4):
                u = (bits >> np.uint64(16 * q)) & np.uint64(0xFFFF)
                v = x[i, 4 * k + q]
                out[i, 4 * k + q] = v * scale if (u >= threshold and v > zero) else zero
        if f4 < f:
            bits = _mix64(row + np.uint64(nb + 1) * _GOLDEN)
            for q in range(f - f4):
                u = (bits >> np.uint64(16 * q)) & np.uint64(0xFFFF)
                v = x[i, f4 + q]
                out[i, f4 + q] = v * scale if (u >= threshold and v > zero) else zero


@numba.njit(cache=True, parallel=True)
def _masked_scale(grad, out, scale, res):
    """res = grad * scale where out > 0, else 0 (backward of :func:`_relu_dropout`)."""
    n, f = grad.shape
    zero = np.float32(0.0)
    for i in prange(n):
        for j in range(f):
            res[i, j] = grad[i, j] * scale if out[i, j] > zero else zero
