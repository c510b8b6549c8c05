"""``parallel_and_serial``: the two compilations of one kernel keep apart in numba's cache."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np

from shoal.utils.jit import parallel_and_serial, renamed

KERNEL = textwrap.dedent(
    """
    import sys
    import numba
    import numpy as np
    from numba import prange
    from shoal.utils.jit import parallel_and_serial

    def ids_py(out):
        for p in prange(out.shape[0]):
            out[p] = numba.get_thread_id()

    par, ser = parallel_and_serial(ids_py)

    if __name__ == "__main__":
        out = np.full(64, -1, np.int64)
        if sys.argv[1] == "serial-first":  # as a test on a small input would
            ser(out)
        par(out)
        print(len(np.unique(out)), sum(par.stats.cache_hits.values()))
    """
)


def _run(tmp_path, how: str) -> tuple[int, int]:
    env = {**os.environ, "NUMBA_NUM_THREADS": "2", "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run(
        [sys.executable, str(tmp_path / "kernel.py"), how],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.split()
    return int(out[0]), int(out[1])


def test_a_parallel_kernel_loads_its_own_cache_entry_after_its_serial_twin(tmp_path):
    """numba keys cache entries by signature, not by compile options: the serial twin compiled
    first would be what the parallel kernel loads. With the renamed copies, the parallel one
    compiled after its twin, then loaded from the cache by a new process, still runs its
    iterations on both threads."""
    (tmp_path / "kernel.py").write_text(KERNEL)
    threads, hits = _run(tmp_path, "serial-first")
    assert (threads, hits) == (2, 0)  # compiled here, after the serial one
    threads, hits = _run(tmp_path, "load")
    assert (threads, hits) == (2, 1)  # from the cache: still parallel


def test_renamed_is_the_same_function_under_another_name():
    def scale(x, k=2, *, by=3):
        return x * k * by

    f = renamed(scale, "copy")
    assert f.__qualname__.endswith("scale.copy")
    assert f.__module__ == scale.__module__
    assert f(5) == scale(5) == 30 and f(5, 1, by=1) == 5


def test_both_compilations_compute_the_same():
    def total(a):
        s = 0.0
        for i in range(a.shape[0]):
            s += a[i]
        return s

    par, ser = parallel_and_serial(total)
    a = np.arange(100, dtype=np.float64)
    assert par(a) == ser(a) == a.sum()
