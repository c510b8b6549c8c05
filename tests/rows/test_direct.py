"""Planned row reads (sorted, coalesced, O_DIRECT) against the memory-mapped reference."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.rows import _kernels as K
from shoal.rows.direct import (
    PAGE,
    RowFile,
    RowReader,
    aligned_empty,
    load_array,
    read_file_into,
)


def _mm(tmp_path, arr, name="x.npy"):
    np.save(tmp_path / name, arr)
    return np.load(tmp_path / name, mmap_mode="r")


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("dim", [1, 3, 128, 1500])
def test_read_equals_memmap(tmp_path, direct, dim):
    rng = np.random.default_rng(dim)
    x = rng.random((3000, dim)).astype(np.float32)
    mm = _mm(tmp_path, x)
    r = RowReader(RowFile.of(mm), threads=3, direct=direct, merge_gap=PAGE)
    for n in (1, 7, 500, 3000):
        ids = np.unique(rng.integers(0, 3000, n))
        out = np.full((len(ids), dim), np.nan, np.float32)
        r.read(ids, out)
        assert np.array_equal(out, x[ids])
    # first and last rows (file borders), and a permuted destination
    ids = np.array([0, 1, 2998, 2999])
    dest = np.array([3, 0, 2, 1])
    out = np.zeros((4, dim), np.float32)
    r.read(ids, out, dest)
    assert np.array_equal(out[dest], x[ids])
    r.close()


def test_empty_and_bad_ids(tmp_path):
    mm = _mm(tmp_path, np.ones((10, 4), np.float32))
    r = RowReader(RowFile.of(mm))
    assert r.read(np.empty(0, np.int64), np.empty((0, 4), np.float32)) == 0
    with pytest.raises(ValueError, match="sorted, unique"):
        r.read(np.array([3, 3]), np.empty((2, 4), np.float32))
    with pytest.raises(ValueError, match="sorted, unique"):
        r.read(np.array([10]), np.empty((1, 4), np.float32))
    with pytest.raises(ValueError, match="out must be"):
        r.read(np.array([1]), np.empty((1, 5), np.float32))


def test_truncated_file_is_an_error(tmp_path):
    mm = _mm(tmp_path, np.ones((5000, 16), np.float32))
    r = RowReader(RowFile.of(mm), direct=False)
    with open(tmp_path / "x.npy", "r+b") as f:
        f.truncate(128 + 100 * 64)
    with pytest.raises(OSError, match="truncated"):
        r.read(np.array([1, 4000]), np.empty((2, 16), np.float32))


def test_plan_runs_coalesces_by_gap():
    # rows of 512 bytes at offset 128: rows 0..7 share pages 0-1, row 100 is 12 pages away
    ids = np.array([0, 1, 7, 100, 101], np.int64)
    n = len(ids)
    start, end, ptr = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n + 1, np.int64)
    nr = K._plan_runs(ids, 128, 512, 512, PAGE, 0, 1 << 20, start, end, ptr)
    assert nr == 2 and list(ptr[:3]) == [0, 3, 5]
    assert start[0] == 0 and end[0] == 2 * PAGE and start[1] == 12 * PAGE
    nr = K._plan_runs(ids, 128, 512, 512, PAGE, 16 * PAGE, 1 << 20, start, end, ptr)
    assert nr == 1 and end[0] == 13 * PAGE
    # max_run splits a dense range
    ids = np.arange(64, dtype=np.int64)
    nr = K._plan_runs(ids, 0, 512, 512, PAGE, 0, 2 * PAGE, start, end, ptr)
    assert nr == 4 and np.all(end[:nr] - start[:nr] == 2 * PAGE)


def test_load_array_copies_and_keeps_in_memory(tmp_path):
    a = np.arange(100_003, dtype=np.int64)
    mm = _mm(tmp_path, a, "a.npy")
    out = load_array(mm, chunk=4096)
    assert isinstance(out, np.ndarray) and not isinstance(out, np.memmap)
    assert np.array_equal(out, a)
    plain = np.ones(3)
    assert load_array(plain) is plain


@pytest.mark.parametrize("rows", [1, 8, 1000, 1001])
def test_a_file_read_into_an_aligned_array_without_staging(tmp_path, rows):
    """Whole pages straight into the array, the last partial page through one page; the
    same bytes as the file's start (the file may be longer: a pack padded to a page)."""
    rng = np.random.default_rng(rows)
    x = rng.random((rows, 24)).astype(np.float32)  # 96 B rows: pages split rows
    path = tmp_path / "seg.rows"
    path.write_bytes(x.tobytes() + b"\0" * (-x.nbytes % PAGE))
    out = aligned_empty(x.shape, np.float32)
    assert out.ctypes.data % PAGE == 0 and out.flags.c_contiguous
    got = read_file_into(path, out, chunk=2 * PAGE)
    if got is None:  # this file system refuses O_DIRECT: nothing read
        pytest.skip("no O_DIRECT here")
    assert got == -(-x.nbytes // PAGE) * PAGE and np.array_equal(out, x)


def test_read_file_into_declines_what_it_cannot_read_directly(tmp_path):
    x = np.arange(4096, dtype=np.float32).reshape(-1, 8)
    path = tmp_path / "seg.rows"
    path.write_bytes(x.tobytes())
    unaligned = aligned_empty((x.size + 1,), np.float32)[1:].reshape(x.shape)
    assert read_file_into(path, unaligned) is None  # not on a page: the caller reads
    assert read_file_into(path, aligned_empty((0, 8), np.float32)) is None
    short = aligned_empty((len(x) + 1000, 8), np.float32)
    if read_file_into(path, aligned_empty(x.shape, np.float32)) is not None:
        with pytest.raises(OSError, match="file ends"):
            read_file_into(path, short)
