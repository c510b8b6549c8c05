"""A full disk, reported in one line: which path, which filesystem, its free bytes, the need.

Every writer goes through :func:`shoal.utils.io.atomic_output_dir`,
:func:`shoal.utils.io.scratch_space`, the atomic file writers or :func:`open_output_memmap`;
each turns a write that failed for lack of space into a
:class:`~shoal.errors.ShoalDiskFullError`: the one line of README.md's "The pipeline, command
by command" (exit 1; ``-v`` adds the traceback).

Three ways a write runs out of space, all caught:

- ``write()`` fails with ``ENOSPC`` (or ``EDQUOT``, a quota);
- numpy's ``tofile`` writes short and raises ``OSError: N requested and M written`` without
  an errno, and ``torch.save`` raises a ``RuntimeError`` from its C++ stream: taken as a full
  disk when the filesystem has under :data:`NEARLY_FULL` bytes left;
- a page of a memory map cannot be backed and the process dies of ``SIGBUS``: never, because
  :func:`open_output_memmap` reserves the file's blocks (``posix_fallocate``) when it creates
  it, which fails with ``ENOSPC`` before anything is written.

Commands that know their output's size before writing (``shoal store build``, an import of a
``.npy``/``.npz``) call :func:`check_free_space` first and refuse without writing anything.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shoal.errors import ShoalDiskFullError

__all__ = [
    "NEARLY_FULL",
    "FileSystem",
    "check_free_space",
    "disk_full_error",
    "filesystem_of",
    "inner_need",
    "is_out_of_space",
    "open_output_memmap",
    "reporting_full_disk",
    "root_cause",
]

#: A short write without an errno counts as a full disk when fewer bytes than this are free.
NEARLY_FULL = 1 << 20

#: Messages of failed writes that carry no errno: numpy's short ``tofile``, and torch.save's
#: C++ stream (``basic_ios::clear: iostream error``, ``unexpected pos``, ``file write failed``)
_SHORT_WRITE = re.compile(
    r"\d+ requested and \d+ written|iostream error|unexpected pos \d+|file write failed"
)
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


@dataclass(frozen=True)
class FileSystem:
    """The filesystem holding a path: its mount point, type, free and total bytes."""

    mount: Path
    fstype: str
    free: int
    total: int

    def describe(self) -> str:
        return f"{self.mount} ({self.fstype}) has {_size(self.free)} free of {_size(self.total)}"


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor (an output not yet created)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _mount_point(path: Path) -> Path:
    path = Path(os.path.realpath(path))
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def _fstype(mount: Path) -> str:
    best = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[1].replace("\\040", " ") == str(mount):
                best = fields[2]  # the last mount on a point is the visible one
    return best


def filesystem_of(path: str | os.PathLike) -> FileSystem:
    """The filesystem that holds ``path`` (or would: the nearest existing ancestor)."""
    p = _existing(Path(path))
    usage = shutil.disk_usage(p)
    mount = _mount_point(p)
    return FileSystem(mount=mount, fstype=_fstype(mount), free=usage.free, total=usage.total)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def is_out_of_space(exc: BaseException, path: str | os.PathLike) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is a write that ran out of space
    on the filesystem of ``path`` (or a :class:`~shoal.errors.ShoalDiskFullError` an inner
    writer raised). Call it before removing the partial output: a short write without an
    errno counts only while that filesystem is nearly full."""
    for e in _chain(exc):
        if isinstance(e, ShoalDiskFullError):  # an inner writer's report: the outer one
            # names its own output, when both are on the same filesystem
            return e.mount == str(_mount_point(_existing(Path(path))))
        if isinstance(e, OSError) and e.errno in _NO_SPACE:
            return True
    for e in _chain(exc):
        if isinstance(e, (OSError, RuntimeError)) and _SHORT_WRITE.search(str(e)):
            with contextlib.suppress(OSError):
                return shutil.disk_usage(_existing(Path(path))).free < NEARLY_FULL
    return False


def inner_need(exc: BaseException, need: int | None) -> int | None:
    """``need``, else the bytes an inner :class:`~shoal.errors.ShoalDiskFullError` in
    ``exc``'s chain knew its write needed (a part of the output: still a lower bound)."""
    if need is not None:
        return need
    for e in _chain(exc):
        if isinstance(e, ShoalDiskFullError) and e.need:
            return e.need
    return None


def root_cause(exc: BaseException) -> BaseException:
    """The OSError under an inner :class:`~shoal.errors.ShoalDiskFullError`, else ``exc``."""
    for e in _chain(exc):
        if isinstance(e, OSError):
            return e
    return exc


def disk_full_error(
    path: str | os.PathLike,
    *,
    need: int | None = None,
    what: str = "",
    fix: str | None = None,
    before: bool = False,
    removed: str = "the partial output",
) -> ShoalDiskFullError:
    """The one-line error for ``path``'s filesystem as it is now: ``before`` (a refusal up
    front, nothing written) or after a write failed and its partial output was removed."""
    fs = filesystem_of(path)
    need_text = f"; {what or 'the output'} needs at least {_size(need)}" if need else ""
    if before:
        head = "not enough space, nothing written"
    else:
        head = f"no space left on device, {removed} removed"
    return ShoalDiskFullError(
        f"{head}: {fs.describe()}{need_text}",
        path=path,
        fix=fix or f"free space on {fs.mount} or write to another filesystem",
        free=fs.free,
        need=need,
        mount=str(fs.mount),
    )


def check_free_space(
    path: str | os.PathLike, need: int, *, what: str = "the output", fix: str | None = None
) -> None:
    """Refuse (:class:`~shoal.errors.ShoalDiskFullError`) before writing ``need`` bytes at
    ``path`` when its filesystem has fewer free."""
    if need <= 0:
        return
    if shutil.disk_usage(_existing(Path(path))).free < need:
        raise disk_full_error(path, need=need, what=what, fix=fix, before=True)


@contextlib.contextmanager
def reporting_full_disk(
    path: str | os.PathLike,
    *,
    need: int | None = None,
    what: str = "",
    fix: str | None = None,
    cleanup: object = None,
    removed: str = "the partial output",
) -> Iterator[None]:
    """Turn a write in the body that ran out of space on ``path``'s filesystem into a
    :class:`~shoal.errors.ShoalDiskFullError` (raised from it). ``cleanup`` (a callable), when
    given, runs on any exception before the error is built, so the free bytes it reports are
    what the user has once the partial output is gone."""
    try:
        yield
    except BaseException as e:
        full = not isinstance(e, (KeyboardInterrupt, SystemExit)) and is_out_of_space(e, path)
        if callable(cleanup):
            cleanup()
        if full:
            need = inner_need(e, need)
            error = disk_full_error(path, need=need, what=what, fix=fix, removed=removed)
            raise error from root_cause(e)
        raise


def open_output_memmap(
    path: str | os.PathLike, dtype: np.dtype | type | str, shape: tuple[int, ...]
) -> np.memmap:
    """``np.lib.format.open_memmap(path, mode="w+")`` with the file's blocks reserved up front
    (``posix_fallocate``): a full disk is an ``ENOSPC`` here, reported as
    :class:`~shoal.errors.ShoalDiskFullError`, not a ``SIGBUS`` at the first write into an
    unbacked page of the map."""
    path = Path(path)
    need = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    with reporting_full_disk(path, need=need, what=path.name):
        out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
        size = out.offset + need
        if size > 0:
            fd = os.open(path, os.O_RDWR)
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as e:
                if e.errno in _NO_SPACE:
                    del out
                    path.unlink(missing_ok=True)
                    raise
                if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    raise
            finally:
                os.close(fd)
    return out
