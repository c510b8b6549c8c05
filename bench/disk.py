"""This machine's disk, measured the way shoal reads it: sequential bandwidth and random 4 KiB
direct reads at queue depths 1, 8 and 32.

The out-of-core results (``bench/results/out_of_core*.md``) are read against these limits: an
epoch's bytes read divided by the sequential bandwidth is the least I/O time a sweep can take,
and a window of scattered rows is bounded by the random-read rate. ``fio`` is not installed on
this machine, so the reads are made as shoal makes them: ``O_DIRECT`` (no page cache) with
``os.preadv`` on a pool of threads, one outstanding request per thread (the queue depth).

- sequential: 1 MiB direct reads in file order, one thread (``--seq-threads``, default 1);
- random: aligned 4 KiB direct reads at uniform offsets, from 1, 8 and 32 threads.

The file (``--size``, default 4 GiB, in ``--dir``, default ``bench/work``) is written once and
kept for reruns (``--keep``) or removed. Each figure is the median of ``--repeats`` (default 3)
runs of ``--seconds`` (default 5) each.

Usage::

    python bench/disk.py [--size 4GiB] [--dir bench/work] [--repeats 3] [--seconds 5]

Writes ``bench/results/disk.json`` and ``bench/results/disk.md``.
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import sys
import threading
import time
from pathlib import Path

from common import RESULTS, WORK, command_line, machine_line, parse_size, write_json
from common import write_text_atomic as write_text

PAGE = 4096
SEQ_BLOCK = 1 << 20


def _aligned(nbytes: int) -> mmap.mmap:
    return mmap.mmap(-1, nbytes)  # page-aligned anonymous memory, as O_DIRECT needs


def make_file(path: Path, size: int) -> None:
    """``size`` bytes of non-zero data (written once; kept when it exists at that size)."""
    if path.exists() and path.stat().st_size == size:
        return
    block = os.urandom(SEQ_BLOCK)
    with open(path, "wb") as f:
        for _ in range(size // SEQ_BLOCK):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())


def sequential(path: Path, seconds: float) -> float:
    """Bytes per second of 1 MiB direct reads in file order (wrapping), for ``seconds``."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = _aligned(SEQ_BLOCK)
    size = os.fstat(fd).st_size
    done, off, t0 = 0, 0, time.perf_counter()
    try:
        while time.perf_counter() - t0 < seconds:
            n = os.preadv(fd, [buf], off)
            done += n
            off = (off + SEQ_BLOCK) % (size - size % SEQ_BLOCK)
    finally:
        os.close(fd)
    return done / (time.perf_counter() - t0)


def random_reads(path: Path, threads: int, seconds: float, seed: int) -> float:
    """Aligned 4 KiB direct reads per second at uniform offsets, ``threads`` outstanding."""
    size = path.stat().st_size
    pages = size // PAGE
    counts = [0] * threads
    stop = threading.Event()

    def worker(i: int) -> None:
        import random

        rng = random.Random(seed * 1000 + i)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        buf = _aligned(PAGE)
        try:
            while not stop.is_set():
                os.preadv(fd, [buf], rng.randrange(pages) * PAGE)
                counts[i] += 1
        finally:
            os.close(fd)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    t0 = time.perf_counter()
    for t in pool:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in pool:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="4GiB", help="test file size (default 4GiB)")
    ap.add_argument(
        "--dir", default=str(WORK), help="where the test file goes (default bench/work)"
    )
    ap.add_argument("--repeats", type=int, default=3, help="runs per figure (default 3)")
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds per run (default 5)")
    ap.add_argument("--keep", action="store_true", help="keep the test file for reruns")
    args = ap.parse_args()
    machine = machine_line(threads=1)  # before this script's own reads load the machine
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / "disk_probe.bin"
    size = parse_size(args.size)
    t0 = time.perf_counter()
    make_file(path, size)
    print(
        f"test file {path} ({size / 2**30:.1f} GiB) in {time.perf_counter() - t0:.0f} s", flush=True
    )
    seq = [sequential(path, args.seconds) for _ in range(args.repeats)]
    rnd = {
        qd: [random_reads(path, qd, args.seconds, seed=r) for r in range(args.repeats)]
        for qd in (1, 8, 32)
    }
    if not args.keep:
        path.unlink()
    res = {
        "command": command_line("disk.py", sys.argv[1:]),
        "machine": machine,
        "file_bytes": size,
        "filesystem": str(d.resolve()),
        "sequential_bytes_per_s": statistics.median(seq),
        "sequential_runs": seq,
        "random_4k": {
            str(qd): {
                "reads_per_s": statistics.median(v),
                "bytes_per_s": statistics.median(v) * PAGE,
                "runs": v,
            }
            for qd, v in rnd.items()
        },
    }
    write_json(RESULTS / "disk.json", res, indent=2)
    mb = 1e6
    lines = [
        "# The disk shoal reads from: sequential and random direct reads",
        "",
        f"Command: `{res['command']}`  ",
        f"Machine: {res['machine']}",
        "",
        f"`O_DIRECT` reads (no page cache) with `os.preadv` on a {size / 2**30:.1f} GiB file in "
        f"`{res['filesystem']}`, median of {args.repeats} runs of {args.seconds:g} s. `fio` is not "
        "installed here; the reads are made as shoal's row reader makes them.",
        "",
        "| read | queue depth | reads/s | MB/s |",
        "|---|---|---|---|",
        f"| sequential, 1 MiB | 1 | {res['sequential_bytes_per_s'] / SEQ_BLOCK:,.0f} | "
        f"{res['sequential_bytes_per_s'] / mb:,.0f} |",
    ]
    for qd, r in res["random_4k"].items():
        lines.append(
            f"| random, 4 KiB | {qd} | {r['reads_per_s']:,.0f} | {r['bytes_per_s'] / mb:,.1f} |"
        )
    seq_mb = res["sequential_bytes_per_s"] / mb
    best = max(r["bytes_per_s"] for r in res["random_4k"].values()) / mb
    lines += [
        "",
        f"A sweep of 1 GB takes at least {1e3 / seq_mb:.1f} s at the sequential rate; the same "
        f"gigabyte as scattered 4 KiB rows at the best queue depth takes {1e3 / best:.1f} s "
        f"({seq_mb / best:.1f}x).",
    ]
    write_text(RESULTS / "disk.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
