"""The LLVM intrinsics of the row kernels: exact 16-bit decoding, a harmless prefetch, a
count of set bits."""

from __future__ import annotations

import numba
import numpy as np

from shoal.utils._intrinsics import bfloat_to_float, half_to_float, popcount, prefetch_row


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


def test_popcount_counts_the_set_bits_of_every_word():
    """0, one bit anywhere (the sign bit too), all 64, and random words against Python's
    count of ones."""

    @numba.njit
    def counts(words):
        out = np.empty(len(words), np.int64)
        for i in range(len(words)):
            out[i] = popcount(words[i])
        return out

    one_bit = [np.int64(1) << k for k in range(63)] + [np.iinfo(np.int64).min]
    rand = np.random.default_rng(0).integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, 200)
    words = np.array([0, -1, *one_bit, *rand], np.int64)
    want = [bin(int(w) & (2**64 - 1)).count("1") for w in words]
    assert counts(words).tolist() == want
