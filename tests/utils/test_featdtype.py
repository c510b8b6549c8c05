"""Feature dtypes (shoal.utils.featdtype): names, encodings, the int8 quantisation's bound."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.errors import ShoalInputError
from shoal.utils.featdtype import (
    FEATURE_DTYPES,
    convert_block,
    decode,
    encode,
    feature_dtype,
    of_stored,
    scales_of,
    scales_path,
)


def _x(n: int = 50, f: int = 7) -> np.ndarray:
    x = np.random.default_rng(0).normal(0, 3, (n, f)).astype(np.float32)
    x[4] = 0  # a zero row
    x[5, 2] = 1e-8  # tiny values
    return x


def test_names_stored_dtypes_and_sizes():
    assert FEATURE_DTYPES == ("float32", "float16", "bfloat16", "int8")
    assert [feature_dtype(n).itemsize for n in FEATURE_DTYPES] == [4, 2, 2, 1]
    assert (
        feature_dtype("int8").row_bytes(10) == 14 and feature_dtype("bfloat16").row_bytes(10) == 20
    )
    assert feature_dtype(None).name == "float32"
    assert of_stored(np.uint16).name == "bfloat16" and of_stored(np.int8).name == "int8"
    with pytest.raises(ShoalInputError, match="float8.*not one this version reads") as e:
        feature_dtype("float8", path="g/meta.json")
    assert "bfloat16" in str(e.value)
    assert scales_path("a/features.npy").name == "features.scales.npy"


def test_float16_and_bfloat16_round_to_nearest():
    x = _x()
    h, s = encode(x, "float16")
    assert s is None and h.dtype == np.float16 and np.array_equal(h, x.astype(np.float16))
    b, _ = encode(x, "bfloat16")
    got = decode(b, "bfloat16")
    assert b.dtype == np.uint16
    # nearest: within half a bfloat16 ulp (8 significant bits) of the float32 value
    assert np.all(np.abs(got - x) <= np.abs(x) * 2.0**-8 + 1e-30)
    # exact for values bfloat16 holds, ties to even
    ties = np.array([[1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5]], np.float32)
    assert decode(encode(ties, "bfloat16")[0], "bfloat16").tolist() == [
        [1.0, 1.0, 1.0 + 4 * 2**-8, -2.5]
    ]


def test_int8_per_row_quantisation_within_half_a_step():
    x = _x()
    q, s = encode(x, "int8")
    assert q.dtype == np.int8 and s.dtype == np.float32 and s.shape == (x.shape[0],)
    np.testing.assert_array_equal(s, np.abs(x).max(1) / np.float32(127))
    assert np.abs(q).max() == 127 and s[4] == 0 and not q[4].any()
    y = decode(q, "int8", s)
    assert not y[4].any()  # a zero row decodes to exact zeros
    assert np.all(np.abs(y - x) <= s[:, None] / 2 * (1 + 1e-6))
    with pytest.raises(ValueError, match="scales"):
        decode(q, "int8")


def test_conversion_between_dtypes_and_empty_blocks():
    x = _x()
    q, s = encode(x, "int8")
    h, hs = convert_block(q, s, feature_dtype("int8"), feature_dtype("float16"))
    assert hs is None and np.array_equal(h, decode(q, "int8", s).astype(np.float16))
    same = convert_block(q, s, feature_dtype("int8"), feature_dtype("int8"))
    assert same[0] is q and same[1] is s
    for name in FEATURE_DTYPES:
        rows, sc = encode(np.empty((0, 3), np.float32), name)
        assert rows.shape == (0, 3) and decode(rows, name, sc).shape == (0, 3)


def test_scales_are_found_beside_a_mapped_int8_file(tmp_path):
    q, s = encode(_x(), "int8")
    np.save(tmp_path / "features.npy", q)
    np.save(tmp_path / "features.scales.npy", s)
    m = np.load(tmp_path / "features.npy", mmap_mode="r")
    np.testing.assert_array_equal(scales_of(m), s)
    np.testing.assert_array_equal(scales_of(m[10:20]), s[10:20])
    assert scales_of(np.zeros((2, 2), np.float32)) is None
    with pytest.raises(ValueError, match="scales passed"):
        scales_of(np.asarray(q))
    (tmp_path / "features.scales.npy").unlink()
    with pytest.raises(ShoalInputError, match="without their scales"):
        scales_of(m)
