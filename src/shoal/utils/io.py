"""Atomic outputs, checksums and size parsing.

Every output directory is written to a temporary sibling (``.NAME.tmp-XXXX``) and renamed into
place only when complete, so a crash or a validation error never leaves a half-written
directory that looks valid.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import mmap
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import tomllib

from shoal.errors import ShoalInputError
from shoal.utils.diskspace import (
    check_free_space,
    disk_full_error,
    inner_need,
    is_out_of_space,
    reporting_full_disk,
    root_cause,
)
from shoal.utils.mapped import mapping_of

__all__ = [
    "load_toml",
    "atomic_output_dir",
    "copy_rows",
    "file_checksum",
    "parse_size",
    "read_json",
    "read_meta",
    "release_pages",
    "remove_stale_siblings",
    "scratch_space",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_json_output",
]

log = logging.getLogger(__name__)

#: Suffix of the file (beside a temporary directory) recording which process writes it.
OWNER_SUFFIX = ".owner"

_CHECKSUM_BLOCK = 1 << 22


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:  # not Linux
        return ""


def _owner_file(tmp: Path) -> Path:
    return tmp.with_name(tmp.name + OWNER_SUFFIX)


def _mark_owner(tmp: Path) -> None:
    """Record the writer (host, boot, pid) of a temporary directory in a file beside it (not
    inside: the directory's contents become the output)."""
    _owner_file(tmp).write_text(
        json.dumps({"host": socket.gethostname(), "boot": _boot_id(), "pid": os.getpid()})
    )


def _writer_alive(tmp: Path) -> bool:
    """Whether the process that created ``tmp`` may still be writing it.

    Unknown (no owner file yet, another host, unreadable) counts as alive: only directories
    whose writer is known to be gone are removed.
    """
    try:
        owner = json.loads(_owner_file(tmp).read_text())
        host, boot, pid = owner["host"], owner["boot"], int(owner["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        # no owner file: written by an older shoal, or created a moment ago (between mkdtemp
        # and the owner file); one untouched for an hour is stale
        try:
            return time.time() - tmp.stat().st_mtime < 3600
        except OSError:
            return False
    if host != socket.gethostname():
        return True
    if boot != _boot_id():
        return False  # the machine rebooted since
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_siblings(out: str | os.PathLike) -> list[Path]:
    """Remove temporary siblings of ``out`` (``.NAME.tmp-*``, ``.NAME.old-*``) left behind by
    a writer that is gone (killed, crashed, machine rebooted). Logs each removal at WARNING
    and returns the removed paths. Siblings whose writer still runs are left alone."""
    out = Path(out)
    removed = []
    if not out.parent.is_dir():
        return removed
    for prefix in (f".{out.name}.tmp-", f".{out.name}.old-"):
        for p in sorted(out.parent.glob(prefix + "*")):
            if not p.is_dir() or _writer_alive(p):
                continue
            size = 0
            with contextlib.suppress(OSError):  # another cleaner may be removing it too
                size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
            shutil.rmtree(p, ignore_errors=True)
            _owner_file(p).unlink(missing_ok=True)
            log.warning(
                "removed %s (%.1f MB): a temporary output left by a writer that is gone",
                p,
                size / 1e6,
            )
            removed.append(p)
    return removed


@contextlib.contextmanager
def atomic_output_dir(
    out: str | os.PathLike, *, overwrite: bool = False, need: int | None = None
) -> Iterator[Path]:
    """Yield a temporary sibling directory of ``out``; rename it to ``out`` on success.

    On any exception the temporary directory is removed and ``out`` is untouched; running out
    of space raises :class:`~shoal.errors.ShoalDiskFullError` (``out``, its filesystem, the
    free bytes left). ``need``: bytes checked against the free space before anything is
    created. An existing ``out`` is an error unless ``overwrite`` (then replaced once the new
    one is complete). The temporary directory records its writer (``.NAME.tmp-XXXX.owner``),
    so the next writer of ``out`` removes it if its writer was killed
    (:func:`remove_stale_siblings`).
    """
    out = Path(out)
    if out.exists() and not overwrite:
        raise ShoalInputError(
            "output already exists", path=out, fix="choose another --out or pass --overwrite"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_siblings(out)
    if need is not None:
        check_free_space(out, need)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        _mark_owner(tmp)
        yield tmp
    except BaseException as e:
        full = not isinstance(e, (KeyboardInterrupt, SystemExit)) and is_out_of_space(e, tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        _owner_file(tmp).unlink(missing_ok=True)
        if full:
            raise disk_full_error(out, need=inner_need(e, need)) from root_cause(e)
        raise
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)
    _owner_file(tmp).unlink(missing_ok=True)


@contextlib.contextmanager
def scratch_space(
    scratch_dir: str | os.PathLike | None, *, beside: str | os.PathLike, prefix: str = "shoal"
) -> Iterator[Path]:
    """A private temporary directory for large intermediate files, removed on exit.

    It is created inside ``scratch_dir`` when given (the user's ``--scratch-dir``), else
    beside ``beside`` (the output or the input being read: a disk the user chose, never the
    system temp dir, which is often RAM-backed). The directory is named
    ``.{prefix}-scratch.tmp-XXXX``, records its writer, and is removed by a later
    :func:`remove_stale_siblings` if its process is killed.
    """
    base = Path(scratch_dir) if scratch_dir is not None else Path(beside).resolve().parent
    base.mkdir(parents=True, exist_ok=True)
    remove_stale_siblings(base / f"{prefix}-scratch")
    tmp = Path(tempfile.mkdtemp(prefix=f".{prefix}-scratch.tmp-", dir=base))

    def remove() -> None:
        shutil.rmtree(tmp, ignore_errors=True)
        _owner_file(tmp).unlink(missing_ok=True)

    fix = f"free space on the scratch directory {base} or choose another with --scratch-dir"
    try:
        with reporting_full_disk(base, fix=fix, cleanup=remove, removed="the scratch files"):
            _mark_owner(tmp)
            yield tmp
    finally:
        remove()


def file_checksum(path: str | os.PathLike) -> str:
    """Return ``"sha256:<hex>"`` of a file, read in 4 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(_CHECKSUM_BLOCK)
            if not block:
                break
            h.update(block)
    return "sha256:" + h.hexdigest()


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write JSON to ``path`` through a temporary file and a rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with reporting_full_disk(path, cleanup=lambda: tmp.unlink(missing_ok=True)):
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=False)
            f.write("\n")
        os.replace(tmp, path)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary sibling file and a rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with reporting_full_disk(path, need=len(data), cleanup=lambda: tmp.unlink(missing_ok=True)):
            tmp.write_bytes(data)
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json_output(path: str | os.PathLike | None, obj: Any) -> None:
    """A command's ``--json`` output: ``'-'`` prints to stdout, a path is written atomically,
    None does nothing."""
    if path is None or path == "":
        return
    if str(path) == "-":
        import sys

        json.dump(obj, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    write_json_atomic(path, obj)


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file, turning a missing or malformed file into a ``ShoalInputError``."""
    path = Path(path)
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise ShoalInputError("file not found", path=path) from None
    except json.JSONDecodeError as e:
        raise ShoalInputError(
            f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})",
            path=path,
            fix="the file is corrupted; rebuild it",
        ) from None


def read_meta(
    directory: str | os.PathLike,
    *,
    kind: str,
    version: int | tuple[int, ...],
    what: str,
    fix: str,
) -> dict[str, Any]:
    """Read and validate ``directory/meta.json`` of one of shoal's on-disk formats.

    Args:
        directory: the directory (graph, assignment, store, ...).
        kind: the expected value of the ``format`` field (e.g. ``"shoal-store"``).
        version: the supported ``format_version`` (or versions).
        what: what the directory should be, for messages (e.g. ``"a store directory"``).
        fix: how to make one (e.g. ``"build one with `shoal store build ...`"``).

    Raises ShoalInputError naming the directory or the field when the directory or its
    ``meta.json`` is missing, is not JSON, or has another format or version.
    """
    path = Path(directory)
    if not path.is_dir():
        raise ShoalInputError(f"not {what} (no such directory)", path=path, fix=fix)
    meta_path = path / "meta.json"
    if not meta_path.exists():
        raise ShoalInputError(f"not {what}: meta.json is missing", path=path, fix=fix)
    meta = read_json(meta_path)
    if not isinstance(meta, dict) or meta.get("format") != kind:
        got = meta.get("format") if isinstance(meta, dict) else None
        raise ShoalInputError(
            f"meta.json: field 'format' is {got!r}, expected {kind!r}",
            path=meta_path,
            fix=f"point at {what}; {fix}",
        )
    versions = (version,) if isinstance(version, int) else tuple(version)
    if meta.get("format_version") not in versions:
        raise ShoalInputError(
            f"meta.json: format_version {meta.get('format_version')} is not supported "
            f"(this shoal reads {' and '.join(map(str, versions))})",
            path=meta_path,
            fix=f"rewrite it with this version of shoal: {fix}",
        )
    return meta


_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgtp]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}


def parse_size(text: str | int) -> int:
    """Parse a size like ``512MB``, ``4GB``, ``1.5GiB``, ``100k`` or ``1024`` into bytes.

    Decimal units (kB, MB, GB) are powers of 1000, binary units (KiB, MiB, GiB) powers of 1024.
    """
    if isinstance(text, int):
        return text
    m = _SIZE_RE.match(text)
    if not m:
        raise ShoalInputError(
            f"cannot parse size {text!r}", fix="write a number with a unit, e.g. 512MB or 4GiB"
        )
    value, unit = float(m.group(1)), (m.group(2) or "").lower()
    base = unit[:1]
    mult = _UNITS[base] if "i" not in unit else 1024 ** "_kmgtp".index(base)
    return int(value * mult)


def copy_rows(a: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Return a contiguous copy of ``a[start:stop]``.

    For a memory map (``np.memmap``/``np.load(mmap_mode=...)``), the pages just read are then
    dropped from the process's resident set (``MADV_DONTNEED``; the data stays in the page
    cache and on disk), so a sequential pass over a large mapped array keeps peak RSS flat
    instead of growing to the file size.
    """
    out = np.array(a[start:stop])
    mm = mapping_of(a) if isinstance(a, np.memmap) else None
    if mm is None or a.base is not mm or not hasattr(mm, "madvise") or stop <= start:
        return out
    row = a.strides[0] if a.ndim else a.itemsize
    skip = a.offset % mmap.ALLOCATIONGRANULARITY  # np.memmap maps from an aligned start
    lo = skip + start * row
    hi = min(skip + stop * row, len(mm))
    lo -= lo % mmap.PAGESIZE
    if hi > lo:
        mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
    return out


def release_pages(a: np.ndarray) -> None:
    """Drop the resident pages of a memory-mapped array from this process (``MADV_DONTNEED``).

    The data stays in the file (and in the page cache while the kernel keeps it), so the next
    read is correct; only this process's resident set shrinks. A no-op for in-memory arrays.
    Used after batched reads of large mapped arrays so a pass over them keeps RSS bounded.
    """
    mm = mapping_of(a)
    if mm is not None and hasattr(mm, "madvise") and len(mm):
        mm.madvise(mmap.MADV_DONTNEED)


def load_toml(path: str | os.PathLike) -> dict[str, Any]:
    """A TOML file as a dict (ShoalInputError naming the file when it is missing or not
    valid TOML): the one reader of every ``--config`` file."""
    p = Path(path)
    try:
        return tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise ShoalInputError("config file not found", path=p) from None
    except tomllib.TOMLDecodeError as e:
        raise ShoalInputError(f"invalid TOML: {e}", path=p) from None
