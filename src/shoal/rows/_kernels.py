"""Numba kernels of rows read from disk and gathered (private; numpy arrays only): row gathers
into float32 buffers, row normalisation, positioned reads of single rows, the planning and
reading of coalesced runs (:mod:`shoal.rows.direct`), the cache-or-window gather of the
budgeted store (:mod:`shoal.rows.featstore`) and the CLOCK victims of the block cache
(:mod:`shoal.rows.blockcache`)."""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from shoal.utils._intrinsics import bfloat_to_float, half_to_float
from shoal.utils.jit import parallel_and_serial

#: Below this many rows a gather runs serially: waking threads costs more (the sampler's
#: kernels use the same threshold, ``shoal.sample._kernels.PARALLEL_MIN``).
PARALLEL_MIN = 512


def _gather_rows_py(src, ids, out):
    """out[i, :] = src[ids[i], :] (with dtype conversion), rows in parallel."""
    f = src.shape[1]
    for i in prange(ids.shape[0]):
        r = ids[i]
        for j in range(f):
            out[i, j] = src[r, j]


_gather_rows_par, _gather_rows_ser = parallel_and_serial(_gather_rows_py, nogil=True)


def _gather_rows(src, ids, out):
    (_gather_rows_par if ids.shape[0] >= PARALLEL_MIN else _gather_rows_ser)(src, ids, out)


@numba.njit(cache=True, parallel=True)
def _row_normalize(out, n):
    """Divide each of the first n rows by its sum (rows summing to 0 are left alone)."""
    f = out.shape[1]
    for i in prange(n):
        s = 0.0
        for j in range(f):
            s += out[i, j]
        if s != 0.0:
            inv = 1.0 / s
            for j in range(f):
                out[i, j] *= inv


#: ``ssize_t pread(int fd, void *buf, size_t count, off_t offset)`` from the C library, bound
#: by name at link time (so the kernels below can be cached, unlike a ctypes pointer).
_pread = numba.types.ExternalFunction(
    "pread",
    numba.types.int64(numba.types.int32, numba.types.intp, numba.types.uint64, numba.types.int64),
)


@numba.njit(cache=True, parallel=True, nogil=True)
def _pread_rows(fd, first, stride, row_bytes, ids, dest, out):
    """Row ``ids[i]`` of a file (``row_bytes`` at ``first + ids[i] * stride``) into row
    ``dest[i]`` of the C-contiguous ``out``, one positioned read per row, rows in parallel.
    Returns the number of rows that could not be read whole (0 on success)."""
    base = out.ctypes.data
    bad = 0
    for i in prange(ids.shape[0]):
        pos = first + ids[i] * stride
        dst = base + dest[i] * row_bytes
        done = 0
        while done < row_bytes:  # pread may return short counts
            n = _pread(np.int32(fd), dst + done, np.uint64(row_bytes - done), pos + done)
            if n <= 0:
                bad += 1
                break
            done += n
    return bad


@numba.njit(cache=True, nogil=True)
def _plan_runs(ids, offset, stride, row_bytes, page, gap, max_run, run_start, run_end, row_ptr):
    """Coalesce the page-aligned extents of rows ``ids`` (sorted, unique) into read runs.

    Row ``v`` occupies bytes ``[offset + v * stride, + row_bytes)``; its extent is that range
    widened to whole ``page``s. Consecutive extents whose gap is at most ``gap`` bytes join one
    run while the run stays within ``max_run`` bytes. Writes runs ``[run_start, run_end)`` and
    ``row_ptr`` (run ``r`` holds ids ``row_ptr[r]:row_ptr[r + 1]``); returns the run count.
    """
    n = ids.shape[0]
    r = -1
    cur_lo = np.int64(0)
    cur_hi = np.int64(0)
    for i in range(n):
        pos = offset + ids[i] * stride
        lo = (pos // page) * page
        hi = ((pos + row_bytes + page - 1) // page) * page
        if r >= 0 and lo <= cur_hi + gap and hi - cur_lo <= max_run:
            if hi > cur_hi:
                cur_hi = hi
            continue
        if r >= 0:
            run_start[r] = cur_lo
            run_end[r] = cur_hi
        r += 1
        row_ptr[r] = i
        cur_lo = lo
        cur_hi = hi
    if r >= 0:
        run_start[r] = cur_lo
        run_end[r] = cur_hi
    row_ptr[r + 1] = n
    return r + 1


@numba.njit(cache=True, nogil=True)
def _read_runs(fd, runs, r0, r1, ids, dest, layout, staging, out, out2):
    """Read runs ``r0:r1`` of ``runs = (run_start, run_end, row_ptr)`` (see :func:`_plan_runs`;
    ``layout = (offset, stride, row_bytes)`` of the file) into ``staging`` (page-aligned, at
    least the longest run) with one ``pread`` each, and copy their rows: the row of ``ids[i]``
    goes to bytes ``[dest[i] * row_bytes, + row_bytes)`` of ``out`` (1-D uint8), or, when
    ``dest[i] < 0``, to row ``-1 - dest[i]`` of ``out2``. Serial and GIL-free: callers run
    several in threads. Returns bytes read, or ``-1 - i`` when run ``i`` ended before its
    last row (a truncated file)."""
    run_start, run_end, row_ptr = runs
    offset, stride, row_bytes = layout
    sbase = staging.ctypes.data
    total = np.int64(0)
    for r in range(r0, r1):
        start = run_start[r]
        want = run_end[r] - start
        got = np.int64(0)
        while got < want:
            k = _pread(np.int32(fd), sbase + got, np.uint64(want - got), start + got)
            if k <= 0:
                break
            got += k
        total += got
        for i in range(row_ptr[r], row_ptr[r + 1]):
            rel = offset + ids[i] * stride - start
            if rel + row_bytes > got:
                return -1 - r
            if dest[i] >= 0:
                d = dest[i] * row_bytes
                for b in range(row_bytes):
                    out[d + b] = staging[rel + b]
            else:
                d = (-1 - dest[i]) * row_bytes
                for b in range(row_bytes):
                    out2[d + b] = staging[rel + b]
    return total


@numba.njit(cache=True, nogil=True, parallel=True)
def _gather_cached(ids, slot, cache, cold, rows, out):
    """``out[i] = cache[slot[ids[i]]]`` when the row is cached (``slot >= 0``), else the row of
    ``ids[i]`` in ``rows`` (``cold`` sorted: binary search), as float32, rows in parallel.
    Returns the number of cached rows, or ``-1 - i`` when an ``ids[i]`` is in neither."""
    f = out.shape[1]
    n = ids.shape[0]
    hit = np.zeros(n, np.int8)
    for i in prange(n):
        v = ids[i]
        s = slot[v]
        if s >= 0:
            hit[i] = 1
            for j in range(f):
                out[i, j] = cache[s, j]
            continue
        p = np.searchsorted(cold, v)
        if p >= cold.shape[0] or cold[p] != v:
            hit[i] = -1
            continue
        for j in range(f):
            out[i, j] = rows[p, j]
    hits = 0
    for i in range(n):
        if hit[i] < 0:
            return -1 - i
        hits += hit[i]
    return hits


@numba.njit(cache=True)
def _clock_victims(ref, hand, k, out):
    """CLOCK: ``k`` (<= len(ref)) distinct slots to evict from ``hand`` on; a slot whose
    reference bit is set gets a second chance (the bit is cleared). Chosen slots get the bit
    set (the new block is referenced) so one call never picks a slot twice. Returns the hand."""
    n = ref.shape[0]
    got = 0
    while got < k:
        if ref[hand]:
            ref[hand] = 0
        else:
            ref[hand] = 1
            out[got] = hand
            got += 1
        hand += 1
        if hand == n:
            hand = 0
    return hand


# ------------------------------------------------------------------ decoding compact rows
# Rows stored as float16 or bfloat16 (uint16 bits) or int8 (one float32 scale per row) are
# decoded straight into the caller's float32 buffer (docs/format.md#feature-dtypes); numba
# has no float16, so 16-bit values are converted by LLVM intrinsics (the CPU's vector
# half-to-float conversion; bfloat16 bits shifted up): exact for every value.


@numba.njit(cache=True, nogil=True, inline="always")
def _put16(src, r, out, i, half):
    """Row ``r`` of 16-bit rows (float16 when ``half``, else bfloat16) into ``out[i]``."""
    n = out.shape[1]
    if half:
        for j in range(n):
            out[i, j] = half_to_float(src[r, j])
    else:
        for j in range(n):
            out[i, j] = bfloat_to_float(src[r, j])


@numba.njit(cache=True, nogil=True, inline="always")
def _put8(src, r, out, i, scale):
    """Row ``r`` of int8 rows times ``scale`` into ``out[i]``."""
    s = np.float32(scale)
    for j in range(out.shape[1]):
        out[i, j] = np.float32(src[r, j]) * s


def _gather16_py(src, ids, out, half):
    for i in prange(ids.shape[0]):
        _put16(src, ids[i], out, i, half)


def _gather8_py(src, ids, out, scales):
    for i in prange(ids.shape[0]):
        r = ids[i]
        _put8(src, r, out, i, scales[r])


_gather16_par, _gather16_ser = parallel_and_serial(_gather16_py, nogil=True)
_gather8_par, _gather8_ser = parallel_and_serial(_gather8_py, nogil=True)


def _gather16(src, ids, out, half):
    """``out[i]`` = 16-bit row ``src[ids[i]]`` (float16 or bfloat16) as float32."""
    (_gather16_par if ids.shape[0] >= PARALLEL_MIN else _gather16_ser)(src, ids, out, half)


def _gather8(src, ids, out, scales):
    """``out[i] = src[ids[i]] * scales[ids[i]]`` of int8 rows."""
    (_gather8_par if ids.shape[0] >= PARALLEL_MIN else _gather8_ser)(src, ids, out, scales)


@numba.njit(cache=True, nogil=True, inline="always")
def _find(ids, slot, cold, i):
    """(where row ``ids[i]`` is: 0 cached, 1 in the window, -1 neither; its row there)."""
    v = ids[i]
    s = slot[v]
    if s >= 0:
        return 0, s
    p = np.searchsorted(cold, v)
    if p >= cold.shape[0] or cold[p] != v:
        return -1, 0
    return 1, p


@numba.njit(cache=True, nogil=True)
def _count_hits(hit):
    hits = 0
    for i in range(hit.shape[0]):
        if hit[i] < 0:
            return -1 - i
        hits += hit[i]
    return hits


@numba.njit(cache=True, parallel=True, nogil=True)
def _gather_cached16(ids, slot, cache, cold, rows, out, half):
    """:func:`_gather_cached` of 16-bit rows (float16 when ``half``, else bfloat16), decoded
    into the float32 ``out``."""
    n = ids.shape[0]
    hit = np.zeros(n, np.int8)
    for i in prange(n):
        where, r = _find(ids, slot, cold, i)
        if where == 0:
            hit[i] = 1
            _put16(cache, r, out, i, half)
        elif where == 1:
            _put16(rows, r, out, i, half)
        else:
            hit[i] = -1
    return _count_hits(hit)


@numba.njit(cache=True, parallel=True, nogil=True)
def _gather_cached8(ids, slot, cache, cold, rows, out, scales):
    """:func:`_gather_cached` of int8 rows, row ``v`` times ``scales[v]``."""
    n = ids.shape[0]
    hit = np.zeros(n, np.int8)
    for i in prange(n):
        where, r = _find(ids, slot, cold, i)
        if where == 0:
            hit[i] = 1
            _put8(cache, r, out, i, scales[ids[i]])
        elif where == 1:
            _put8(rows, r, out, i, scales[ids[i]])
        else:
            hit[i] = -1
    return _count_hits(hit)
