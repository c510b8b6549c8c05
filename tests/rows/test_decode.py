"""Compact rows decoded into float32 by every gather (shoal.rows.decode): equal to an
independent numpy decode, from memory, memory maps, files read directly, caches and windows."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.rows.decode import decode_cached, decode_rows
from shoal.rows.featstore import DiskFeatures
from shoal.rows.gather import gather_rows, read_rows, source_rows
from shoal.rows.memory import MemoryRows
from shoal.rows.opener import open_rows
from shoal.utils.featdtype import FEATURE_DTYPES, encode

DTYPES = FEATURE_DTYPES


def _want(rows: np.ndarray, name: str, scales=None) -> np.ndarray:
    """Independent numpy decode."""
    if name == "float16":
        return rows.view(np.float16).astype(np.float32)
    if name == "bfloat16":
        return (rows.astype(np.uint32) << 16).view(np.float32)
    if name == "int8":
        return rows.astype(np.float32) * scales[:, None]
    return rows.astype(np.float32)


def _matrix(tmp_path, name: str, n: int = 300, f: int = 9):
    x = np.random.default_rng(1).normal(0, 2, (n, f)).astype(np.float32)
    x[7] = 0
    rows, scales = encode(x, name)
    np.save(tmp_path / "features.npy", rows)
    if scales is not None:
        np.save(tmp_path / "features.scales.npy", scales)
    mapped = np.load(tmp_path / "features.npy", mmap_mode="r")
    want = _want(rows, name, scales)
    return mapped, rows, scales, want


def test_every_half_and_bfloat16_bit_pattern_decodes_exactly():
    bits = np.arange(1 << 16, dtype=np.uint16).reshape(-1, 64)
    ids = np.random.default_rng(0).permutation(bits.shape[0])
    out = np.empty((len(ids), 64), np.float32)
    decode_rows(bits.view(np.float16), ids, out)  # subnormals and infinities included
    want = _want(bits[ids], "float16").view(np.uint32)
    got = out.view(np.uint32)
    # a NaN keeps its sign and payload; a signalling one comes out quiet (the CPU's
    # conversion sets the quiet bit, numpy's does not)
    quiet = np.where(np.isnan(out), np.uint32(0x00400000), np.uint32(0))
    np.testing.assert_array_equal(got | quiet, want | quiet)
    assert (np.isnan(out) == np.isnan(want.view(np.float32))).all()
    decode_rows(bits, ids, out)
    assert np.array_equal(out.view(np.uint32), _want(bits[ids], "bfloat16").view(np.uint32))


@pytest.mark.parametrize("name", DTYPES)
def test_gathers_from_memory_maps_and_files_equal_numpy(tmp_path, name):
    mapped, rows, scales, want = _matrix(tmp_path, name)
    ids = np.array([5, 7, 0, 299, 5, 42], np.int64)  # any order, repeats
    np.testing.assert_array_equal(gather_rows(mapped, ids), want[ids])
    np.testing.assert_array_equal(gather_rows(rows, ids, scales=scales), want[ids])
    out = np.full((8, rows.shape[1]), -1, np.float32)
    read_rows(mapped, ids[:3], out, at=np.array([6, 1, 3]))
    np.testing.assert_array_equal(out[[6, 1, 3]], want[ids[:3]])
    src = open_rows(mapped)
    assert src.dtype == rows.dtype and src.row_bytes == rows.shape[1] * rows.itemsize
    np.testing.assert_array_equal(source_rows(src, ids), want[ids])
    # stacked members (a part's core rows, then its halo rows) keep their scales in order
    stack = open_rows([mapped[:100], mapped[100:]])
    np.testing.assert_array_equal(source_rows(stack, ids), want[ids])
    mem = MemoryRows(rows, scales)
    np.testing.assert_array_equal(source_rows(mem, ids), want[ids])
    assert gather_rows(mapped, np.empty(0, np.int64)).shape == (0, rows.shape[1])
    src.close()
    stack.close()


@pytest.mark.parametrize("name", DTYPES)
def test_budgeted_store_caches_compact_rows_and_decodes_them(tmp_path, name):
    mapped, rows, scales, want = _matrix(tmp_path, name)
    row_bytes = rows.shape[1] * rows.itemsize
    fs = DiskFeatures(mapped, cache_bytes=50 * row_bytes, priority=np.arange(300)[::-1].copy())
    assert fs.cached_rows == 50 and fs.cache.dtype == rows.dtype  # stored size: more rows
    ids = np.array([299, 3, 250, 7, 3], np.int64)
    np.testing.assert_array_equal(fs.gather(ids).numpy(), want[ids])
    w = fs.window([ids, np.array([1, 2], np.int64)])
    assert w.rows.dtype == rows.dtype and w.bytes_read >= 4 * row_bytes
    np.testing.assert_array_equal(w.gather(np.array([2, 299, 7])), want[[2, 299, 7]])
    u = np.array([0, 7, 100], np.int64)
    np.testing.assert_array_equal(
        fs.read_rows(u, np.empty((3, rows.shape[1]), np.float32)), want[u]
    )
    fs.close()
    whole = DiskFeatures(np.asarray(rows) if name != "int8" else mapped)  # in memory (int8: mapped)
    np.testing.assert_array_equal(whole.gather(ids).numpy(), want[ids])


def test_cached_kernel_reports_missing_rows():
    q, s = encode(np.ones((4, 2), np.float32), "int8")
    slot = np.array([0, -1, -1, -1], np.int32)
    out = np.empty((2, 2), np.float32)
    got = decode_cached(np.array([0, 2]), slot, q[:1], np.array([1]), q[1:2], out, scales=s)
    assert got == -2  # row 2 is neither cached nor in the window
