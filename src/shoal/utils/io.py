"""Atomic outputs, checksums and size parsing.

Every output directory is written to a temporary sibling (``.NAME.tmp-XXXX``) and renamed into
place only when complete, so a crash or a validation error never leaves a half-written
directory that looks valid.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from shoal.errors import ShoalInputError

__all__ = [
    "atomic_output_dir",
    "copy_rows",
    "file_checksum",
    "parse_size",
    "read_json",
    "write_json_atomic",
]

_CHECKSUM_BLOCK = 1 << 22


@contextlib.contextmanager
def atomic_output_dir(out: str | os.PathLike, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling directory of ``out``; rename it to ``out`` on success.

    On any exception the temporary directory is removed and ``out`` is untouched. If ``out``
    exists it is an error unless ``overwrite`` is true (the old directory is then replaced only
    after the new one is complete).
    """
    out = Path(out)
    if out.exists() and not overwrite:
        raise ShoalInputError(
            "output already exists", path=out, fix="choose another --out or pass --overwrite"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)


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
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


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
    mm = getattr(a, "_mmap", None)
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
