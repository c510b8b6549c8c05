"""The LLVM intrinsics of the row kernels: exact 16-bit decoding, a harmless prefetch."""

from __future__ import annotations

import numba
import numpy as np

from shoal.utils._intrinsics import bfloat_to_float, half_to_float, prefetch_row


@numba.njit
def _halves(bits, out):
    for i in range(bits.shape[0]):
        out[i] = half_to_float(bits[i])


@numba.njit
def _bfloats(bits, out):
    for i in range(bits.shape[0]):
        out[i] = bfloat_to_float(bits[i])


@numba.njit
def _prefetched_sum(x, rows):
    s = 0.0
    for k in range(rows.shape[0]):
        if k + 1 < rows.shape[0]:
            prefetch_row(x, rows[k + 1])
        s += x[rows[k], 0]
    return s


def test_every_half_decodes_as_numpy_does():
    bits = np.arange(65536, dtype=np.uint16)  # subnormals, infinities, NaNs, -0 included
    out = np.empty(65536, np.float32)
    _halves(bits, out)
    ref = bits.view(np.float16).astype(np.float32)
    np.testing.assert_array_equal(
        out.view(np.uint32)[~np.isnan(ref)], ref.view(np.uint32)[~np.isnan(ref)]
    )
    assert np.isnan(out[np.isnan(ref)]).all()


def test_every_bfloat_is_its_bits_shifted_up():
    bits = np.arange(65536, dtype=np.uint16)
    out = np.empty(65536, np.float32)
    _bfloats(bits, out)
    np.testing.assert_array_equal(out.view(np.uint32), bits.astype(np.uint32) << 16)


def test_prefetch_changes_nothing_it_reads():
    x = np.arange(40, dtype=np.float64).reshape(10, 4)
    rows = np.array([9, 0, 3, 3, 7])
    assert _prefetched_sum(x, rows) == float(x[rows, 0].sum())
