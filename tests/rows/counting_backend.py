"""A row backend written outside shoal (tests/rows/test_backends.py): rows read through the
file's memory map, every read counted in a log file per process.

Registered for a run by ``SHOAL_ROW_BACKENDS=counting=tests.rows.counting_backend:CountingRows``
and chosen by ``--rows-backend counting``. With ``SHOAL_TEST_ROWS_STRICT=1`` the module, when
imported (a rank imports it when the run opens its first rows), makes shoal's own planned
reads (:class:`~shoal.rows.direct.RowReader`) and every positioned read of a feature file
raise: a feature row that reaches past the backend fails the run.
"""

from __future__ import annotations

import os
from pathlib import Path

from shoal.rows.direct import RowFile
from shoal.rows.memory import MappedRows

LOG = "SHOAL_TEST_ROWS_LOG"
STRICT = "SHOAL_TEST_ROWS_STRICT"


class CountingRows(MappedRows):
    """:class:`~shoal.rows.memory.MappedRows` that appends ``rows bytes path`` of every read
    to ``$SHOAL_TEST_ROWS_LOG/<pid>.log``."""

    def __init__(self, rows: RowFile, **kw: object) -> None:
        super().__init__(rows, **kw)
        where = os.environ.get(LOG)
        self._log = Path(where) / f"{os.getpid()}.log" if where else None

    def read(self, ids, out, dest=None, out2=None) -> int:
        n = super().read(ids, out, dest, out2)
        if self._log is not None:
            with open(self._log, "a") as f:
                f.write(f"{len(ids)} {n} {self.file.path}\n")
        return n


def read_log(where: str | os.PathLike) -> list[tuple[int, int, str]]:
    """Every ``(rows, bytes, path)`` logged by the processes of a run."""
    out = []
    for p in Path(where).glob("*.log"):
        for line in p.read_text().splitlines():
            rows, nbytes, path = line.split(" ", 2)
            out.append((int(rows), int(nbytes), path))
    return out


def _refuse(*_a, **_k):
    raise AssertionError("a row was read past the row backend")


def _feature_file(fd: int) -> bool:
    try:
        return "features" in os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return False


if os.environ.get(STRICT) == "1":  # (a test module: patched on import, on purpose)
    import shoal.rows._kernels
    import shoal.rows.direct

    shoal.rows.direct.RowReader.read = _refuse  # shoal's planned reads
    _pread_rows, _preadv = shoal.rows._kernels._pread_rows, os.preadv

    def _pread_checked(fd, *args):
        if _feature_file(fd):
            _refuse()
        return _pread_rows(fd, *args)

    def _preadv_checked(fd, *args):
        if _feature_file(fd):
            _refuse()
        return _preadv(fd, *args)

    shoal.rows._kernels._pread_rows = _pread_checked  # positioned reads of feature files
    os.preadv = _preadv_checked
