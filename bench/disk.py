"""This machine's disk, measured the way shoal reads it: sequential bandwidth and random 4 KiB
direct reads at queue depths 1, 8 and 32.

    python bench/disk.py [--size 4GiB] [--dir bench/work] [--repeats 3] [--seconds 5] [--keep]
    python bench/disk.py --report-only

The out-of-core benchmarks record these limits with each run (``bench/results/disk.json``):
an epoch's bytes read divided by the sequential bandwidth is the least I/O time a sweep can
take, and a window of scattered rows is bounded by the random-read rate. The reads are made
as shoal makes them: ``O_DIRECT`` (no page cache) with ``os.preadv`` on a pool of threads, one
outstanding request per thread (the queue depth):

- sequential: 1 MiB direct reads in file order, one thread;
- random: aligned 4 KiB direct reads at uniform offsets, from 1, 8 and 32 threads.

The file (``--size`` in ``--dir``) is written once and kept (``--keep``) or removed. Each
figure is the median of ``--repeats`` runs of ``--seconds`` each. ``--smoke``: a 4 MiB file
under WORK/smoke, one run of 0.1 s per figure.
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import statistics
import threading
import time
from pathlib import Path

from common import (
    WORK,
    bench_args,
    header,
    load_json,
    new_results,
    out_prefix,
    parse_size,
    write_results,
)

PAGE = 4096
SEQ_BLOCK = 1 << 20
DEPTHS = (1, 8, 32)


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
            done += os.preadv(fd, [buf], off)
            off = (off + SEQ_BLOCK) % (size - size % SEQ_BLOCK)
    finally:
        os.close(fd)
    return done / (time.perf_counter() - t0)


def random_reads(path: Path, threads: int, seconds: float, seed: int) -> float:
    """Aligned 4 KiB direct reads per second at uniform offsets, ``threads`` outstanding."""
    pages = path.stat().st_size // PAGE
    counts = [0] * threads
    stop = threading.Event()

    def worker(i: int) -> None:
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


def render(res: dict) -> str:
    seq = res["sequential_bytes_per_s"]
    runs = len(res["sequential_runs"])
    lines = header(
        "The disk shoal reads from: sequential and random direct reads",
        res,
        f"`O_DIRECT` reads (no page cache) with `os.preadv` on a "
        f"{res['file_bytes'] / 2**20:,.0f} MiB file in `{res['filesystem']}`, median of {runs} "
        f"run(s) of {res['seconds_per_run']:g} s; the reads are made as shoal's row reader "
        "makes them (not with `fio`).",
    )
    lines += [
        "| read | queue depth | reads/s | MB/s |",
        "|---|---|---|---|",
        f"| sequential, 1 MiB | 1 | {seq / SEQ_BLOCK:,.0f} | {seq / 1e6:,.0f} |",
    ]
    for qd, r in res["random_4k"].items():
        lines.append(
            f"| random, 4 KiB | {qd} | {r['reads_per_s']:,.0f} | {r['bytes_per_s'] / 1e6:,.1f} |"
        )
    best = max(r["bytes_per_s"] for r in res["random_4k"].values())
    lines += [
        "",
        f"A sweep of 1 GB takes at least {1e9 / seq:.1f} s at the sequential rate; the same "
        f"gigabyte as scattered 4 KiB rows at the best queue depth takes {1e9 / best:.1f} s "
        f"({seq / best:.1f}x).",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench_args(ap, out="bench/results/disk")
    ap.add_argument("--size", default="4GiB", help="test file size (default 4GiB)")
    ap.add_argument("--dir", default=str(WORK), help="where the test file goes (default WORK)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per figure (default 3)")
    ap.add_argument("--seconds", type=float, default=5.0, help="seconds per run (default 5)")
    ap.add_argument("--keep", action="store_true", help="keep the test file for reruns")
    ap.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    args = ap.parse_args()
    prefix = out_prefix(args, "bench/results/disk")
    if args.report_only:
        write_results(prefix, load_json(prefix.with_suffix(".json")), render)
        return 0
    if args.smoke:
        args.size, args.dir, args.repeats, args.seconds = "4MiB", str(WORK / "smoke"), 1, 0.1
    res = new_results("disk.py", threads=1)  # the machine before this script's reads load it
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / "disk_probe.bin"
    size = parse_size(args.size)
    make_file(path, size)
    seq = [sequential(path, args.seconds) for _ in range(args.repeats)]
    rnd = {
        qd: [random_reads(path, qd, args.seconds, seed=r) for r in range(args.repeats)]
        for qd in DEPTHS
    }
    if not args.keep:
        path.unlink()
    res |= {
        "file_bytes": size,
        "filesystem": str(d.resolve()),
        "seconds_per_run": args.seconds,
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
    write_results(prefix, res, render)
    print(prefix.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
