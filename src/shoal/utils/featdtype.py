"""The stored dtypes of feature rows: the one place that knows them (docs/format.md#feature-dtypes).

A feature matrix is stored as ``float32`` (the default), ``float16`` (IEEE half), ``bfloat16``
(the top 16 bits of a float32, stored as raw ``uint16`` bits: numpy has no bfloat16) or
``int8`` (symmetric per-row quantisation: row ``v`` holds ``q = round(x / s_v)`` with
``s_v = max|x_v| / 127``, and its float32 scale ``s_v`` is stored beside the rows in a sibling
file, ``features.npy`` -> ``features.scales.npy``; a row of zeros has scale 0 and decodes to
zeros). The model always computes in float32: readers decode the stored rows into float32
(``shoal.rows``' kernels; :func:`decode` is the reference in numpy).

The stored numpy dtype names the dtype (``uint16`` is bfloat16, ``int8`` quantised rows), so a
file's rows say how to decode them; :func:`of_stored` reads it, :func:`scales_of` finds an int8
array's scales beside its file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shoal.errors import ShoalInputError
from shoal.utils.mapped import file_of

__all__ = [
    "FEATURE_DTYPES",
    "FeatureDtype",
    "SCALES_SUFFIX",
    "convert_block",
    "decode",
    "encode",
    "feature_dtype",
    "of_stored",
    "scales_of",
    "scales_path",
]


@dataclass(frozen=True)
class FeatureDtype:
    """One stored feature dtype: its ``name`` (``meta.json``'s ``feature_dtype``), the numpy
    dtype of the stored items (``stored``), whether rows carry a float32 scale each
    (``scaled``) and a ``code`` the decoding kernels branch on."""

    name: str
    stored: np.dtype
    scaled: bool
    code: int

    @property
    def itemsize(self) -> int:
        """Bytes of one stored item (4, 2, 2, 1); an int8 row adds 4 bytes of scale."""
        return int(self.stored.itemsize)

    def row_bytes(self, dim: int) -> int:
        """Bytes one row of ``dim`` items takes on disk (its scale included)."""
        return int(dim) * self.itemsize + (4 if self.scaled else 0)


_ALL = (
    FeatureDtype("float32", np.dtype(np.float32), False, 0),
    FeatureDtype("float16", np.dtype(np.float16), False, 1),
    FeatureDtype("bfloat16", np.dtype(np.uint16), False, 2),
    FeatureDtype("int8", np.dtype(np.int8), True, 3),
)
_BY_NAME = {d.name: d for d in _ALL}
_BY_STORED = {d.stored: d for d in _ALL}

#: the names ``--feature-dtype`` takes, float32 (the default) first
FEATURE_DTYPES: tuple[str, ...] = tuple(d.name for d in _ALL)
#: an int8 matrix ``X.npy``'s per-row float32 scales are ``X.scales.npy``
SCALES_SUFFIX = ".scales.npy"
_FIX = f"use one of {', '.join(FEATURE_DTYPES)}"


def feature_dtype(name: str | None, *, path: str | Path | None = None) -> FeatureDtype:
    """The dtype named ``name`` (None: float32); an unknown name raises ShoalInputError
    naming ``path`` (the meta.json or option it came from) and the known names."""
    if name is None:
        return _ALL[0]
    d = _BY_NAME.get(str(name))
    if d is None:
        raise ShoalInputError(
            f"feature_dtype {name!r} is not one this version reads", path=path, fix=_FIX
        )
    return d


def of_stored(dtype: np.dtype | str) -> FeatureDtype:
    """The feature dtype whose stored items are ``dtype`` (float64 reads as float32's kind)."""
    dt = np.dtype(dtype)
    if dt == np.float64:
        return _ALL[0]
    d = _BY_STORED.get(dt)
    if d is None:
        raise ValueError(f"{dt} is not a stored feature dtype ({_FIX})")
    return d


def scales_path(path: str | Path) -> Path:
    """The scales file of an int8 matrix file: ``X.npy`` -> ``X.scales.npy``."""
    p = Path(path)
    return p.with_name(p.name[: -len(".npy")] + SCALES_SUFFIX if p.suffix == ".npy" else p.name)


def scales_of(arr: np.ndarray) -> np.ndarray | None:
    """The float32 per-row scales of the rows of ``arr``: None unless ``arr`` is int8; for a
    memory-mapped int8 ``.npy`` (or a slice of its rows) the matching rows of the scales file
    beside it, memory-mapped. An in-memory int8 array has no file to find them in: ValueError
    (pass its scales explicitly)."""
    if np.dtype(arr.dtype) != np.int8:
        return None
    place = file_of(arr)
    if place is None or arr.ndim != 2:
        raise ValueError("an in-memory int8 feature array needs its scales passed with it")
    sp = scales_path(place.path)
    if not sp.exists():
        raise ShoalInputError(
            "int8 features without their scales file",
            path=sp,
            fix=f"the scales of {Path(place.path).name} are written beside it: rebuild it",
        )
    with open(place.path, "rb") as f:
        v = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if v == (1, 0) else None
        (read or np.lib.format.read_array_header_2_0)(f)
        header = f.tell()
    first = (place.offset - header) // max(place.stride, 1)
    scales = np.load(sp, mmap_mode="r") if sp.stat().st_size > 128 else np.load(sp)
    return scales[first : first + arr.shape[0]]


def encode(x: np.ndarray, dtype: FeatureDtype | str) -> tuple[np.ndarray, np.ndarray | None]:
    """Float rows ``x`` (2-D) stored as ``dtype``: ``(rows, scales)``, scales None unless int8.
    float16 and bfloat16 round to nearest even; int8 quantises each row symmetrically
    (module docstring; a zero row gets scale 0)."""
    d = dtype if isinstance(dtype, FeatureDtype) else feature_dtype(dtype)
    x = np.asarray(x)
    if d.name == "float32":
        return np.ascontiguousarray(x, dtype=np.float32), None
    if d.name == "float16":
        return np.ascontiguousarray(x, dtype=np.float16), None
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    if d.name == "bfloat16":
        b = x32.view(np.uint32)
        # round to nearest even on the 16 bits dropped (NaN/inf are refused at import)
        r = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
        return r.astype(np.uint16), None
    amax = np.abs(x32).max(axis=1) if x32.shape[1] else np.zeros(x32.shape[0], np.float32)
    scales = (amax / np.float32(127)).astype(np.float32)
    safe = np.where(scales > 0, scales, np.float32(1))
    q = np.rint(x32 / safe[:, None]).clip(-127, 127).astype(np.int8)
    return q, scales


def decode(
    rows: np.ndarray, dtype: FeatureDtype | str, scales: np.ndarray | None = None
) -> np.ndarray:
    """Stored rows as float32 (the numpy reference of the readers' kernels)."""
    d = dtype if isinstance(dtype, FeatureDtype) else feature_dtype(dtype)
    rows = np.asarray(rows)
    if d.name == "bfloat16":
        return (rows.astype(np.uint32) << np.uint32(16)).view(np.float32)
    if d.name == "int8":
        if scales is None:
            raise ValueError("int8 rows need their scales")
        return rows.astype(np.float32) * np.asarray(scales, np.float32)[:, None]
    return rows.astype(np.float32)


def convert_block(
    rows: np.ndarray, scales: np.ndarray | None, source: FeatureDtype, target: FeatureDtype
) -> tuple[np.ndarray, np.ndarray | None]:
    """A block of rows stored as ``source`` (with its scales) stored as ``target`` (same dtype:
    returned as is)."""
    if source == target:
        return rows, scales
    return encode(decode(rows, source, scales), target)
