import numpy as np
import pytest

from shoal.errors import ShoalInputError
from shoal.utils.io import atomic_output_dir, copy_rows, parse_size


def test_copy_rows_equals_slicing(tmp_path):
    a = (np.arange(100_003, dtype=np.int64) * 7) % 13
    np.save(tmp_path / "a.npy", a)
    mm = np.load(tmp_path / "a.npy", mmap_mode="r")
    for start, stop in [(0, 1), (5, 4099), (4096, 70_000), (99_000, 100_003), (7, 7)]:
        got = copy_rows(mm, start, stop)
        assert np.array_equal(got, a[start:stop])
        assert np.array_equal(copy_rows(a, start, stop), a[start:stop])
    # the map stays readable after its pages were released
    assert np.array_equal(np.asarray(mm), a)
    two = np.lib.format.open_memmap(tmp_path / "b.npy", mode="w+", dtype=np.int32, shape=(50, 2))
    two[:] = np.arange(100).reshape(50, 2)
    assert np.array_equal(copy_rows(two, 10, 20), np.arange(20, 40).reshape(10, 2))


def test_parse_size():
    assert parse_size("512MB") == 512 * 10**6
    assert parse_size("4GiB") == 4 * 2**30
    assert parse_size("1.5k") == 1500
    assert parse_size(1024) == 1024
    with pytest.raises(ShoalInputError, match="cannot parse size"):
        parse_size("lots")


def test_atomic_output_dir_leaves_nothing_on_error(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_output_dir(tmp_path / "out") as d:
            (d / "x").write_text("half")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with atomic_output_dir(tmp_path / "out") as d:
        (d / "x").write_text("whole")
    assert (tmp_path / "out" / "x").read_text() == "whole"
    with pytest.raises(ShoalInputError, match="already exists"):
        with atomic_output_dir(tmp_path / "out"):
            pass
