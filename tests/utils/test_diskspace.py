"""A full disk is recognised and reported in one line (shoal.utils.diskspace).

The unit tests run anywhere; those that write onto a real small filesystem (a size-limited
tmpfs, ``small_fs``) need root and skip without it.
"""

from __future__ import annotations

import errno

import numpy as np
import pytest

from shoal.errors import ShoalDiskFullError
from shoal.utils.diskspace import (
    check_free_space,
    filesystem_of,
    is_out_of_space,
    open_output_memmap,
    reporting_full_disk,
)
from shoal.utils.io import atomic_output_dir, scratch_space, write_bytes_atomic


def _raised_from(inner: BaseException, outer: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as e:
            raise outer from e
    except BaseException as e:
        return e


def test_errno_no_space_is_out_of_space(tmp_path):
    assert is_out_of_space(OSError(errno.ENOSPC, "No space left on device"), tmp_path)
    assert is_out_of_space(OSError(errno.EDQUOT, "Disk quota exceeded"), tmp_path)
    assert not is_out_of_space(OSError(errno.EACCES, "Permission denied"), tmp_path)
    assert not is_out_of_space(ValueError("bad row"), tmp_path)
    chained = _raised_from(OSError(errno.ENOSPC, "full"), RuntimeError("wrote 0 rows"))
    assert is_out_of_space(chained, tmp_path)


def test_short_write_counts_only_on_a_nearly_full_filesystem(tmp_path):
    # this test's directory has room: a short write there is not a full disk
    assert filesystem_of(tmp_path).free > (1 << 20)
    assert not is_out_of_space(OSError("991848 requested and 785920 written"), tmp_path)


def test_filesystem_of_a_path_not_yet_created(tmp_path):
    fs = filesystem_of(tmp_path / "a" / "b")
    assert fs.total >= fs.free > 0
    assert tmp_path.resolve().is_relative_to(fs.mount)


def test_check_free_space_refuses_a_need_above_the_free_bytes(tmp_path):
    check_free_space(tmp_path / "out", 1)
    with pytest.raises(ShoalDiskFullError) as e:
        check_free_space(tmp_path / "out", 1 << 62, what="the store")
    msg = str(e.value)
    assert str(tmp_path / "out") in msg and "nothing written" in msg
    assert "the store needs at least" in msg and "\n" not in msg
    assert e.value.need == 1 << 62 and e.value.free < 1 << 62


def test_atomic_output_dir_refuses_up_front(tmp_path):
    with pytest.raises(ShoalDiskFullError), atomic_output_dir(tmp_path / "out", need=1 << 62):
        raise AssertionError("the body must not run")
    assert list(tmp_path.iterdir()) == []


def test_other_errors_pass_through_unchanged(tmp_path):
    with pytest.raises(ValueError, match="not a disk problem"):
        with atomic_output_dir(tmp_path / "out"):
            raise ValueError("not a disk problem")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- on a small real filesystem


def _empty(fs) -> bool:
    return [p.name for p in fs.iterdir()] == []


def test_memmap_output_reserves_its_blocks(small_fs):
    fs = small_fs("64k")
    with pytest.raises(ShoalDiskFullError) as e:
        open_output_memmap(fs / "big.npy", np.float32, (1 << 20,))  # 4 MB on 64 kB: no SIGBUS
    assert e.value.need == 4 << 20 and str(fs) in str(e.value)
    assert _empty(fs)
    small = open_output_memmap(fs / "small.npy", np.float32, (1000,))
    small[:] = 1.0
    small.flush()
    assert np.load(fs / "small.npy").sum() == 1000.0


def test_short_tofile_write_is_a_full_disk(small_fs):
    fs = small_fs("64k")
    path = fs / "x.bin"
    with pytest.raises(ShoalDiskFullError) as e:
        with reporting_full_disk(path, cleanup=lambda: path.unlink(missing_ok=True)):
            with open(path, "wb") as f:
                np.zeros(1 << 18, np.float64).tofile(f)  # 2 MB
    assert "no space left on device" in str(e.value) and "(tmpfs) has" in str(e.value)
    assert _empty(fs)


def test_atomic_dir_and_scratch_name_their_filesystem(small_fs):
    fs = small_fs("64k")
    with pytest.raises(ShoalDiskFullError) as e, atomic_output_dir(fs / "out") as tmp:
        np.save(tmp / "a.npy", np.zeros(1 << 18))
    assert str(e.value).startswith(f"{fs / 'out'}: no space left on device")
    assert _empty(fs)
    with pytest.raises(ShoalDiskFullError) as e, scratch_space(fs, beside=fs) as work:
        np.save(work / "a.npy", np.zeros(1 << 18))
    assert "--scratch-dir" in str(e.value) and "scratch files removed" in str(e.value)
    assert _empty(fs)


def test_atomic_file_writer_leaves_nothing(small_fs):
    fs = small_fs("16k")
    with pytest.raises(ShoalDiskFullError) as e:
        write_bytes_atomic(fs / "r.md", b"x" * 100_000)
    assert e.value.need == 100_000
    assert _empty(fs)


def test_checkpoint_out_of_space(small_fs):
    import torch

    from shoal.training.checkpoint import save_checkpoint

    fs = small_fs("16k")
    with pytest.raises(ShoalDiskFullError) as e:
        save_checkpoint(fs / "last.pt", {"w": torch.zeros(100_000)})  # torch's C++ writer
    assert "--checkpoint-dir" in str(e.value)
    assert _empty(fs)
