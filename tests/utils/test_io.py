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


# ------------------------------------------------------------------------------ stale siblings
def _write_owner(tmp_dir, pid: int) -> None:
    import json
    import socket

    from shoal.utils.io import _boot_id

    owner = tmp_dir.with_name(tmp_dir.name + ".owner")
    owner.write_text(json.dumps({"host": socket.gethostname(), "boot": _boot_id(), "pid": pid}))


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_sibling_of_a_dead_writer_is_removed(tmp_path, caplog):
    import logging
    import os

    stale = tmp_path / ".out.tmp-abc"
    (stale / "part_0").mkdir(parents=True)
    (stale / "part_0" / "indices.npy").write_bytes(b"\0" * 4096)
    _write_owner(stale, _dead_pid())
    live = tmp_path / ".out.tmp-live"
    live.mkdir()
    _write_owner(live, os.getpid())
    other = tmp_path / ".other.tmp-xyz"  # a sibling of another output: not ours to judge
    other.mkdir()
    _write_owner(other, _dead_pid())
    with caplog.at_level(logging.WARNING, logger="shoal.utils.io"):
        with atomic_output_dir(tmp_path / "out") as d:
            (d / "x").write_text("whole")
    assert not stale.exists() and not (tmp_path / ".out.tmp-abc.owner").exists()
    assert live.is_dir() and (tmp_path / ".out.tmp-live.owner").is_file()
    assert other.is_dir()
    assert (tmp_path / "out" / "x").read_text() == "whole"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(stale) in warnings[0].getMessage()
    # the new writer's own owner file is gone once its output is in place; the live one stays
    assert sorted(p.name for p in tmp_path.glob(".out.tmp-*")) == [
        ".out.tmp-live",
        ".out.tmp-live.owner",
    ]


def test_remove_stale_siblings_keeps_live_and_unknown_writers(tmp_path):
    import os

    from shoal.utils.io import remove_stale_siblings

    live = tmp_path / ".s.tmp-1"
    live.mkdir()
    _write_owner(live, os.getpid())
    fresh = tmp_path / ".s.tmp-2"  # no owner file yet (just created): counts as alive
    fresh.mkdir()
    dead = tmp_path / ".s.tmp-3"
    dead.mkdir()
    _write_owner(dead, _dead_pid())
    assert remove_stale_siblings(tmp_path / "s") == [dead]
    assert live.is_dir() and fresh.is_dir() and not dead.exists()
