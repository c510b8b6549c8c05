"""The default memory limit: a cgroup's limit is shared by the processes inside it, the
machine's available memory by the processes on it."""

from __future__ import annotations

import numpy as np
import pytest

import shoal.rows.budget as budget

GiB = 1 << 30


@pytest.mark.parametrize(
    ("cgroup", "procs", "in_cgroup", "expect", "source"),
    [
        (8 * GiB, 2, 1, 0.9 * 8 * GiB, "cgroup"),  # each rank in its own capped group
        (8 * GiB, 2, 2, 0.9 * 4 * GiB, "cgroup"),  # both ranks in one group share it
        (None, 2, 2, 0.9 * 10 * GiB, "MemAvailable"),  # no limit: the machine, shared
        (30 * GiB, 1, 1, 0.9 * 20 * GiB, "MemAvailable"),  # a limit above what is free
        (16 * GiB, 2, 1, 0.9 * 10 * GiB, "MemAvailable"),  # own group, but the host is shared
    ],
)
def test_memory_limit_shares(monkeypatch, cgroup, procs, in_cgroup, expect, source):
    monkeypatch.setattr(budget, "_cgroup_limit", lambda: cgroup)
    monkeypatch.setattr(budget, "_mem_available", lambda: 20 * GiB)
    got, where = budget.memory_limit(procs, cgroup_processes=in_cgroup)
    assert got == pytest.approx(expect, abs=1)
    assert source in where


def test_batch_window_counts_the_sampled_tree():
    # 1024 seeds x (10 + 1) x (5 + 1) rows of 512 bytes
    assert budget.batch_window((10, 5), 1024, 10**8, 512) == 1024 * 66 * 512
    assert budget.batch_window((10, 5), 1024, 1000, 512) == budget.MIN_WINDOW  # tiny graph
    assert budget.batch_window((-1,), 1, 10**6, 1 << 20) == 65 * (1 << 20)  # full = 64


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        # cgroup v1: the memory controller's line, wherever it is (v2's empty line ignored)
        ("12:pids:/a\n0::/\n4:memory:/process_api/fbd6\n1:cpu:/\n", "/process_api/fbd6"),
        ("3:cpu,cpuacct,memory:/jobs/7\n", "/jobs/7"),  # co-mounted controllers
        # cgroup v2 (unified): the one "0::" line
        (
            "0::/user.slice/user-0.slice/session-1.scope\n",
            "/user.slice/user-0.slice/session-1.scope",
        ),
        ("0::/pod:a:b\n", "/pod:a:b"),  # a ':' in the path stays in it
        ("1:name=systemd:/x\n2:cpu:/y\n", ""),  # neither: unknown
        ("", ""),
        (None, ""),  # the file cannot be read (no /proc)
    ],
)
def test_memory_cgroup_is_the_path_of_the_memory_line(monkeypatch, tmp_path, text, expect):
    fake = tmp_path / "cgroup"
    if text is not None:
        fake.write_text(text)
    real = budget.Path
    monkeypatch.setattr(
        budget, "Path", lambda p, *a: fake if str(p) == "/proc/self/cgroup" else real(p, *a)
    )
    assert budget.memory_cgroup() == expect


def test_memory_cgroup_of_this_process():
    try:
        lines = open("/proc/self/cgroup").read().splitlines()
    except OSError:
        pytest.skip("no /proc/self/cgroup here")
    rows = [ln.split(":", 2) for ln in lines if ln]
    mine = [path for _, ctrl, path in rows if "memory" in ctrl.split(",")]
    mine += [path for _, ctrl, path in rows if ctrl == ""]  # v2's, when v1 has no memory line
    assert budget.memory_cgroup() == (mine[0] if mine else "")


@pytest.mark.parametrize("structure", ["auto", "memory"])
def test_a_budget_too_small_names_the_smallest_memory_that_works(structure):
    from shoal.errors import ShoalInputError
    from shoal.utils.io import parse_size

    mib = 1 << 20
    kw = dict(
        feature_bytes=500 * mib,
        structure_bytes=300 * mib,
        min_window=16 * mib,
        reserve=100 * mib,
        index_bytes=10 * mib,
        structure=structure,
    )
    with pytest.raises(ShoalInputError) as e:
        budget.plan_budget(120 * mib, **kw)
    smallest = e.value.fix.split()[2]  # "give --memory NMiB or more ..."
    assert smallest.endswith("MiB")
    plan = budget.plan_budget(parse_size(smallest), **kw)  # the size named works
    assert plan.pool >= 2 * 16 * mib
    with pytest.raises(ShoalInputError):  # and it is the smallest (to the MiB)
        budget.plan_budget(parse_size(smallest) - mib, **kw)


def test_the_footprint_is_this_process_anonymous_memory():
    """Touching 64 MiB of fresh memory raises the measured footprint by about that much
    (anonymous pages); reading a file through the page cache does not."""
    if budget.process_footprint() < 0:
        pytest.skip("no /proc/self/status on this system")
    before = budget.process_footprint()
    block = np.ones(64 << 20, dtype=np.uint8)
    after = budget.process_footprint()
    assert after - before >= 60 << 20
    del block


def test_the_footprint_does_not_count_files_read(tmp_path):
    if budget.process_footprint() < 0:
        pytest.skip("no /proc/self/status on this system")
    f = tmp_path / "data.bin"
    f.write_bytes(b"\1" * (32 << 20))
    before = budget.process_footprint()
    assert len(f.read_bytes()) == 32 << 20  # read (and freed): page cache, not the process
    assert budget.process_footprint() - before < 16 << 20


def test_the_reserve_is_the_footprint_plus_working_memory(monkeypatch):
    staging = budget.STAGING_READERS * 8 * (4 << 20)  # three readers of 8 threads, 4 MiB
    assert budget.staging_bytes(8) == staging
    assert budget.reserve_for(1000, footprint=5000) == 6000 + staging + budget.FOOTPRINT_SLACK
    monkeypatch.setattr(budget, "process_footprint", lambda: -1)
    assert budget.reserve_for(1000) == budget.RESERVE  # unknown: the fixed guess
    # a batch of 2 seeds, fanouts 3,2: at most 2 * 4 * 3 = 24 rows (or every node)
    assert budget.batch_rows((3, 2), 2, 1000) == 24
    assert budget.batch_rows((3, 2), 2, 10) == 10
    assert budget.activation_bytes(24, 10) == budget.ACTIVATION_FACTOR * 24 * 10 * 4


def test_activations_are_refitted_to_the_sampled_batches_and_only_lowered():
    plan = budget.plan_budget(2 * GiB, feature_bytes=4 * GiB, structure_bytes=0, reserve=600 << 20)
    plan.activations, plan.activation_row_bytes = 400 << 20, 1000
    pool = plan.pool
    # batches of at most 100,000 rows: 1.25 * 1e5 * 1000 bytes instead of 400 MiB
    assert plan.fit_activations(100_000) == pool + (400 << 20) - 125_000_000
    assert plan.activations == 125_000_000 and plan.reserve == (200 << 20) + 125_000_000
    assert plan.fit_activations(10**6) == pool + (400 << 20) - 125_000_000  # never raised


def test_mapped_data_counts_a_read_only_map_and_not_anonymous_memory(tmp_path):
    """The touched pages of an array opened with ``mmap_mode="r"`` are counted (clean page
    cache the kernel can take back); an anonymous array of the same size is not."""
    if budget.anonymous_bytes() < 0:
        pytest.skip("no /proc/self/status on this system")
    path = tmp_path / "rows.npy"
    np.save(path, np.ones(8 << 20, dtype=np.float32))  # 32 MiB
    before = budget.mapped_data_bytes()
    rows = np.load(path, mmap_mode="r")
    assert float(rows.sum()) == 8 << 20  # every page touched through the map
    mapped = budget.mapped_data_bytes() - before
    assert 30 << 20 <= mapped <= 34 << 20
    block = np.ones(32 << 20, dtype=np.uint8)  # anonymous: not mapped data
    assert budget.mapped_data_bytes() - before - mapped < 2 << 20
    del rows, block


def test_the_peak_sampler_sees_a_peak_that_is_gone_when_it_ends():
    if budget.anonymous_bytes() < 0:
        pytest.skip("no /proc/self/status on this system")
    import time

    with budget.PeakFootprint(interval=0.01) as peak:
        start = budget.anonymous_bytes()
        block = np.ones(96 << 20, dtype=np.uint8)
        time.sleep(0.1)
        del block
    assert peak.peak_anon - start >= 90 << 20
    assert peak.peak >= peak.peak_anon  # the footprint counts the anonymous memory too
    assert budget.anonymous_bytes() < peak.peak_anon - (64 << 20)


def test_the_structure_is_held_whenever_it_fits_beside_the_two_smallest_windows():
    """``auto`` holds the CSR before any feature cache: here it takes most of what the
    reserve leaves (the features get two windows of the smallest size and what is over), one
    window less and it stays on disk (its row index and a block cache held)."""
    mib = 1 << 20
    kw = dict(feature_bytes=4096 * mib, reserve=512 * mib, min_window=16 * mib, index_bytes=8 * mib)
    held = budget.plan_budget(1024 * mib, structure_bytes=400 * mib, **kw)
    assert held.structure_in_memory and held.held_structure == 400 * mib
    assert held.pool == 1024 * mib - 512 * mib - 400 * mib >= 2 * 16 * mib
    assert held.neighbor_cache == 0
    disk = budget.plan_budget(1024 * mib, structure_bytes=512 * mib - 31 * mib, **kw)
    assert not disk.structure_in_memory
    assert disk.held_structure == 8 * mib + disk.neighbor_cache and disk.neighbor_cache > 0


def test_the_footprint_counts_a_share_of_file_pages_another_process_maps(tmp_path):
    """File pages (a library's code) are charged once to a memory cgroup: measured by share,
    a process counts all of those it alone maps and half of those a second process maps too;
    measured whole, all of them either way."""
    import gc
    import mmap
    import subprocess
    import sys

    if budget.process_footprint() < 0 or budget._file_share() < 0:
        pytest.skip("no Pss_File in /proc/self/smaps_rollup on this system")
    path = tmp_path / "code.bin"
    path.write_bytes(np.arange(32 << 20, dtype=np.uint8).tobytes())  # 32 MiB
    touch = "sum(m[i] for i in range(0, len(m), 4096))"
    gc.collect()  # nothing left to free, and no heap to trim, inside the measured window
    budget.trim_freed_memory()
    with open(path, "rb") as f:
        before = budget.process_footprint(shared=True)
        whole = budget.process_footprint()
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # private, as code is mapped
        sum(m[i] for i in range(0, len(m), 4096))  # every page resident, none written
        alone = budget.process_footprint(shared=True) - before
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import mmap, sys\n"
                f"f = open({str(path)!r}, 'rb')\n"
                "m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)\n"
                f"{touch}\n"
                "print('ready', flush=True)\n"
                "sys.stdin.read()\n",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout.readline().strip() == "ready"
            shared = budget.process_footprint(shared=True) - before
            both = budget.process_footprint() - whole
        finally:
            child.communicate("", timeout=30)
        m.close()
    assert 30 << 20 <= alone <= 36 << 20
    # half of the 32 MiB now (less a little more: the child maps the interpreter's own
    # libraries too, so their share shrinks as well)
    assert 8 << 20 <= shared <= alone - (12 << 20)
    assert both >= 30 << 20


@pytest.mark.parametrize(
    ("features", "structure", "kept"),
    [
        (1 * GiB, "memory", 300 << 20),  # every row and list in memory: the activations
        (8 * GiB, "memory", 0),  # rows read in windows: returned at once
        (1 * GiB, "disk", 0),  # neighbour lists read from disk: returned at once
    ],
)
def test_a_step_keeps_freed_memory_only_when_everything_is_in_memory(features, structure, kept):
    plan = budget.plan_budget(
        4 * GiB,
        feature_bytes=features,
        structure_bytes=64 << 20,
        index_bytes=8 << 20,
        reserve=600 << 20,
        structure=structure,
    )
    plan.activations = 300 << 20
    assert plan.kept_step_memory == kept
