"""Out-of-core distributed training: 2 ranks uncapped, then each rank in its own 2 GiB cgroup.

    python bench/out_of_core_engines.py [--work bench/work/ooc] [--epochs 3] [--cap 2GiB]
        [--engines minibatch,averaging] [--node-orders degree,id] [--no-pack-ablation]
        [--report-only]

Builds (once) the issue-11 graph (``bench/out_of_core.py``: 10M nodes, 100M stored edges, 128
float32 features = 5.1 GB), partitions it into 2 parts with the default partitioner and
builds one store with halo features per node order (``shoal partition G --parts 2``; ``shoal
store build --halo-features --node-order O``: each part holds its core and its halo rows;
``degree`` puts each part's rows in descending in-degree, ``id``, the store's default, in
original ID order). Then, for each engine, back to back: ``shoal train --store S --engine E --model sage
--fanouts 10,5 --hidden 128 --epochs E --eval-every E --threads 1`` as 2 worker processes
(torchrun's environment: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``PORT``), uncapped with the
first node order listed, and with each worker in its own cgroup-v1 memory group capped
at ``--cap`` with every node order (``bench/cgroup.py``; the cap covers the process and its
page cache; the store's page cache is dropped before each run). The ``averaging`` engine packs
the epochs' rows by default (``--pack-epochs 4``: one sweep of the feature file reads the
uncached rows of up to 4 epochs into a pack file per epoch); unless ``--no-pack-ablation``, a
capped run with ``--pack-epochs 0`` (every window sweeps the feature file) follows, first
node order. Writes
``bench/results/out_of_core_engines.{md,json}``: per-epoch seconds, evaluation seconds,
accuracies, bytes read per epoch (both ranks) next to the bytes of the unique rows the
epoch's batches needed, the cache hit rate, and each rank's peak memory.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import socket
import statistics
import subprocess
import time
from pathlib import Path

from common import (
    RESULTS,
    ROOT,
    SHOAL,
    WORK,
    command_line,
    load_json,
    machine_line,
    parse_size,
    run_capped_each,
    write_json,
    write_text_atomic,
)
from out_of_core import footprint, prepare

GiB = 1 << 30


def build_store(g: Path, work: Path, log: list[str], order: str = "degree") -> Path:
    a, s = work / "a10m2", work / f"s10m2-{order}"
    if not (s / "meta.json").exists():
        for cmd in (
            [*SHOAL, "partition", str(g), "--parts", "2", "--out", str(a)],
            [
                *SHOAL,
                "store",
                "build",
                str(g),
                str(a),
                "--out",
                str(s),
                "--halo-features",
                "--node-order",
                order,
                "--overwrite",
            ],
        ):
            if cmd[2] == "partition" and (a / "meta.json").exists():
                continue
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
            log.append(f"{shlex.join(cmd[2:])}  # {time.perf_counter() - t0:.0f} s")
    return s


def rank_cap(cap: str, base: dict | None) -> int:
    """Each rank's cap in bytes: a size, or ``fraction:K``: a K-th of the rank's feature rows
    (core and halo, rank 0's memory plan in the engine's uncapped run ``base``) plus the
    process footprint that run measured (its reserve and the structure's row index)."""
    if not cap.startswith("fraction:"):
        return parse_size(cap)
    k = float(cap.split(":", 1)[1])
    t = (base or {}).get("train") or {}
    plan = (t.get("config") or {}).get("memory_plan") or {}
    fp = footprint(base or {})
    if fp is None or "features" not in plan:
        raise SystemExit(f"cap {cap} needs the engine's uncapped run and its memory plan")
    return int(int(plan["features"]) / k) + fp


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(
    store: Path,
    work: Path,
    engine: str,
    cap: int | None,
    epochs: int,
    order: str = "degree",
    pack: int | None = None,
    cap_spec: str | None = None,
    extra: tuple[str, ...] = (),
) -> dict:
    per_rank = "uncapped" if cap is None else f"{cap / GiB:.2f} GiB per rank"
    if cap is not None and cap_spec and cap_spec.startswith("fraction:"):
        per_rank += f" ({cap_spec})"
    tag = f"{engine} {order} order {per_rank}"
    tag += "" if pack is None else f", --pack-epochs {pack}"
    tag += "".join(f", {x}" for x in [" ".join(extra)] if x)
    kind = "capped" if cap else "uncapped"
    kind += "".join(f"-{x.lstrip('-')}" for x in extra)
    out = work / f"engine-{engine}-{order}-{kind}.json"
    out.unlink(missing_ok=True)
    cmd = [
        *SHOAL,
        "-v",  # the memory plan and the evaluation's working memory, in the kept stderr
        "train",
        "--store",
        str(store),
        "--engine",
        engine,
        "--model",
        "sage",
        "--fanouts",
        "10,5",
        "--hidden",
        "128",
        "--epochs",
        str(epochs),
        "--eval-every",
        str(epochs),
        "--threads",
        "1",
        "--no-progress",
        "--json",
        str(out),
    ]
    cmd += [] if pack is None else ["--pack-epochs", str(pack)]
    cmd += list(extra)
    port = str(_port())
    env = {
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": port,
        "OMP_NUM_THREADS": "1",
    }
    cmds = [(cmd, {**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]
    print(f"[{tag}] {shlex.join(cmd[2:])}", flush=True)
    t0 = time.perf_counter()
    err = work / f"engine-{engine}-{order}-{kind}.stderr"
    with open(err, "w") as f:  # both ranks' messages, kept for the report (a refusal)
        ranks = run_capped_each(cmds, cap, evict_paths=[store], cwd=ROOT, timeout=3600, stderr=f)
    errors = [ln for ln in err.read_text().splitlines() if "error" in ln.lower()]
    res = {
        "tag": tag,
        "engine": engine,
        "order": order,
        "cap": cap,
        "pack": pack,
        "extra": list(extra),
        "cap_spec": cap_spec,
        "errors": errors[-2:],
        "seconds": time.perf_counter() - t0,
        "ranks": ranks,
        "returncode": max(abs(r["returncode"]) for r in ranks),
    }
    if res["returncode"] == 0 and out.exists():
        res["train"] = json.loads(out.read_text())
    res["eval_memory"] = eval_memory(err.read_text())
    print(f"[{tag}] rc={res['returncode']} {res['seconds']:.0f} s", flush=True)
    return res


_EVAL_WORK = re.compile(r"rank (\d+) evaluating val\+test: (\d+) MiB of working memory")
_EVAL_PEAK = re.compile(r"rank (\d+) evaluated: peak footprint (\d+) MiB \(anonymous (\d+) MiB\)")
_LAYER = re.compile(
    r"layer of width (\d+): \d+ targets in \d+ block\(s\) of at most \d+, (\d+) round"
)


def eval_memory(stderr: str) -> dict:
    """The final evaluation's working memory, its peak footprint and anonymous memory (MiB,
    per rank that logged them) and its layers' rounds, from a run's ``-v`` messages."""
    out: dict = {"work_mib": {}, "peak_mib": {}, "peak_anon_mib": {}, "rounds": []}
    final = False
    for ln in stderr.splitlines():
        if m := _EVAL_WORK.search(ln):
            out["work_mib"][m.group(1)] = int(m.group(2))
            final, out["rounds"] = True, []
        elif (m := _EVAL_PEAK.search(ln)) and final:
            out["peak_mib"][m.group(1)] = int(m.group(2))
            out["peak_anon_mib"][m.group(1)] = int(m.group(3))
        elif (m := _LAYER.search(ln)) and final:
            out["rounds"].append(int(m.group(2)))
    return out


def _row(r: dict) -> str:
    t = r.get("train")
    peaks = [x.get("cgroup", {}).get("peak_sampled", {}).get("rss+cache") for x in r["ranks"]]
    peak_s = " / ".join(f"{p / GiB:.2f}" for p in peaks if p) or "-"
    if t is None:
        ooms = [x.get("cgroup", {}).get("oom_kill") for x in r["ranks"]]
        why = "; ".join(r.get("errors") or []).replace("|", "/")
        return (
            f"| {r['tag']} | exit {r['returncode']} (OOM kills {ooms}){': ' + why if why else ''} |"
            + " |" * 14
        )
    hist = t["history"]
    ep = [h["seconds"] for h in hist]
    io = [h.get("io", {}) for h in hist]
    rd = statistics.mean([i.get("bytes_read", 0) for i in io]) / 1e9
    wr = statistics.mean([i.get("bytes_written", 0) or 0 for i in io]) / 1e9
    uq = statistics.median([i.get("unique_bytes", 0) or 0 for i in io]) / 1e9
    req = statistics.median([i.get("requested", 0) for i in io]) * 512 / 1e9
    hit = statistics.median([i.get("cache_hit_rate") or 0 for i in io])
    wait = statistics.median([h["time_split"].get("io_wait", 0.0) for h in hist])
    seq = load_json(RESULTS / "disk.json", {}).get("sequential_bytes_per_s")
    at_seq = f"{statistics.median([i.get('bytes_read', 0) for i in io]) / seq:.1f}" if seq else "-"
    return (
        f"| {r['tag']} | {r['seconds']:.0f} | {' / '.join(f'{s:.1f}' for s in ep)} | "
        f"{statistics.median(ep):.1f} | {statistics.mean(ep):.1f} | {t['eval_seconds']:.0f} | "
        f"{t['val_accuracy']:.4f} | {t['test_accuracy']:.4f} | {rd:.2f} | {wr:.2f} | "
        f"{uq:.2f} | {req:.2f} | {hit:.2f} | {wait:.1f} | {at_seq} | "
        f"{peak_s} |"
    )


def _reads_line(t: dict, e0: float) -> str:
    """How the capped run read: windows swept from the feature file, or packs."""
    io = [h["io"] for h in t["history"]]
    files = (t["config"].get("memory_plan") or {}).get("features", 0)
    windows = statistics.median(i["windows"] for i in io) / 2
    packed = [k for k, i in enumerate(io) if i.get("bytes_written")]
    if not packed:
        win = sum(i["bytes_read"] for i in io)
        rate = win / max(sum(i["read_seconds"] for i in io), 1e-9)
        return (
            f"  Reads: {windows:.1f} windows per rank and epoch, each a sweep of the rank's "
            f"{files / 1e9:.2f} GB of rows (rank 0) at {rate / 1e9:.2f} GB/s per rank while "
            f"both read; one sweep per rank and epoch alone would take {files / rate:.1f} s, "
            f"{files / rate / e0:.1f}x the uncapped epoch."
        )
    sweep = sum(i.get("pack_bytes_read", 0) for i in io)
    wrote = sum(i.get("bytes_written", 0) for i in io)
    rest = [i["bytes_read"] - i.get("pack_bytes_read", 0) for i in io]
    return (
        f"  Reads: sweeps packing the epochs' rows in epoch(s) "
        f"{', '.join(str(k + 1) for k in packed)} (both ranks: {sweep / 1e9:.2f} GB read, "
        f"{wrote / 1e9:.2f} GB of packs written); the epochs' {windows:.1f} window(s) per rank "
        f"then read {statistics.mean(rest) / 1e9:.2f} GB per epoch from their packs (both "
        f"ranks), against a sweep of the rank's {files / 1e9:.2f} GB of rows (rank 0) per "
        "window without packing."
    )


def _order_lines(runs: list[dict]) -> list[str]:
    """Degree order against ID order: the capped epochs and the bytes they read."""
    out = []
    for engine in dict.fromkeys(r["engine"] for r in runs):
        got = {
            r.get("order", "id"): r
            for r in runs
            if r["engine"] == engine
            and r["cap"] is not None
            and "train" in r
            and r.get("pack") is None
            and not r.get("extra")
        }
        if not {"degree", "id"} <= got.keys():
            continue
        h = {o: got[o]["train"]["history"] for o in ("degree", "id")}
        e = {o: statistics.median(x["seconds"] for x in h[o]) for o in h}
        b = {o: statistics.median(x["io"]["bytes_read"] for x in h[o]) for o in h}
        out.append(
            f"- {engine}, capped: degree order epoch {e['degree'] / e['id']:.2f}x the ID "
            f"order's, bytes read {b['degree'] / max(b['id'], 1):.2f}x."
        )
    return ["", "Node order (same cap, same run):", *out] if out else []


def _eval_line(t: dict, base: dict, run: dict) -> str:
    """What the capped run's final evaluation read (both ranks, one disk), against the time
    that takes at the disk's sequential bandwidth."""
    read, read0 = t.get("eval_read_bytes", -1), base.get("eval_read_bytes", -1)
    if read is None or read < 0:
        return "  Evaluation reads: not recorded (a run from before eval_read_bytes)."
    seq = load_json(RESULTS / "disk.json", {}).get("sequential_bytes_per_s")
    at = f" ({read / seq:.0f} s at the disk's sequential bandwidth)" if seq else ""
    unc = (
        f"; the uncapped run read {read0 / 1e9:.2f} GB" if read0 is not None and read0 >= 0 else ""
    )
    line = (
        f"  Evaluation reads: {read / 1e9:.2f} GB from disk, both ranks{at}, in "
        f"{t['eval_seconds']:.0f} s{unc}."
    )
    mem = run.get("eval_memory") or {}
    if mem.get("work_mib"):
        work = ", ".join(f"{v} MiB" for v in mem["work_mib"].values())
        peak = " / ".join(f"{v} MiB" for v in mem.get("peak_anon_mib", {}).values())
        line += f" Working memory (rank 0): {work}"
        line += f", layers' rounds {mem['rounds']}" if mem.get("rounds") else ""
        line += f"; peak anonymous memory {peak}" if peak else ""
        line += f" under the cap of {run['cap'] / 2**20:.0f} MiB." if run.get("cap") else "."
    return line


def _disk_line() -> str:
    """The disk's measured limits (``bench/disk.py``), which both ranks share."""
    disk = load_json(RESULTS / "disk.json", {})
    seq = disk.get("sequential_bytes_per_s")
    if not seq:
        return "Disk limits: not measured (`python bench/disk.py`)."
    rnd = disk.get("random_4k") or {}
    return (
        f"Disk (`{disk.get('command', 'python bench/disk.py')}`), shared by both ranks: "
        f"sequential reads {seq / 1e9:.2f} GB/s; random 4 KiB direct reads "
        + ", ".join(f"{v['bytes_per_s'] / 1e6:.0f} MB/s at queue depth {k}" for k, v in rnd.items())
        + "."
    )


def report(res: dict, path: Path) -> None:
    runs = res["runs"]
    lines = [
        "# Out-of-core distributed training (issue 11)",
        "",
        f"Command: `{res['command']}` ({res['date']}, {res['machine']}, load before "
        f"{res['load_before']}).",
        "",
        "Store: the 10M-node issue-11 graph (100M stored edges, 5.1 GB of features) in 2 "
        "parts (default partitioner), with halo features; each part's core rows are 2.56 GB "
        "and core + halo rows more; one store per node order (`--node-order`, "
        "degree order: each part's rows in descending in-degree; `id`, the store's default: "
        "original ID order; the uncapped runs use the first order of `--node-orders`). "
        "Train: GraphSAGE 10,5 hidden 128, batch 1024, "
        f"{res['epochs']} epochs, 2 worker processes of 1 thread each; exact evaluation of "
        "all 10M nodes after the last epoch (val, then val+test with the best weights). "
        "Capped runs: each worker in its own cgroup-v1 memory group (process + page cache). "
        "`read GB/epoch` (mean over the epochs) and `unique GB/epoch` sum both ranks: bytes read "
        "from disk for the epoch's features (windows, and sweeps packing epochs), and the rows "
        "(distinct per rank and window) its batches needed beyond the cache; `written GB/epoch`: "
        "pack files written (mean); `requested GB` the rows gathered, repeats included. "
        "`median` / `mean`: of the epoch seconds; the mean includes the first epoch, which "
        "carries the run's start (cache load, and the sweep that packs the epochs). `peak GiB`: "
        "each rank's sampled peak of its group's rss + cache. The averaging engine averages "
        "the models at the last epoch only (default), so its epochs are local training. "
        "`io wait s/epoch`: the median epoch's seconds a rank waited for its window's rows; "
        "`read at seq. bandwidth`: the median epoch's bytes read (both ranks, one disk) at the "
        "disk's sequential bandwidth.",
        "",
        _disk_line(),
        "",
        "| run | wall s | epoch seconds | median | mean | eval seconds | val acc | test acc | "
        "read GB/epoch | written GB/epoch | unique GB/epoch | requested GB/epoch | "
        "cache hit rate | io wait s/epoch | read at seq. bandwidth s/epoch | peak GiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_row(r) for r in runs]
    lines.append("")
    for r in runs:
        # the uncapped run of the engine (only the first node order runs uncapped)
        base = next((b for b in runs if b["engine"] == r["engine"] and b["cap"] is None), None)
        t = r.get("train")
        if t is None or base is None or r is base or "train" not in base:
            continue
        e = statistics.median(h["seconds"] for h in t["history"])
        e0 = statistics.median(h["seconds"] for h in base["train"]["history"])
        m = statistics.mean(h["seconds"] for h in t["history"])
        m0 = statistics.mean(h["seconds"] for h in base["train"]["history"])
        lines.append(
            f"- {r['tag']}: epoch {e / e0:.2f}x the uncapped epoch (median; mean of the "
            f"epochs {m / m0:.2f}x), evaluation "
            f"{t['eval_seconds'] / base['train']['eval_seconds']:.2f}x the uncapped evaluation, "
            + (
                f"same accuracy: {t['test_accuracy'] == base['train']['test_accuracy']}."
                if r.get("order") == base.get("order")
                else f"accuracy not compared (the uncapped run is on the {base.get('order')}-ordered "
                "store: other numbering, other samples)."
            )
        )
        lines.append(_reads_line(t, e0))
        lines.append(_eval_line(t, base["train"], r))
    lines += _order_lines(runs)
    lines += ["", "Preparation: " + ("; ".join(res["prepare"]) or "store already built"), ""]
    write_text_atomic(path, "\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=WORK / "ooc")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument(
        "--cap",
        default="2GiB",
        help="cgroup cap of each rank: a size, or fraction:K (a K-th of the rank's feature "
        "rows plus the footprint the engine's uncapped run measured)",
    )
    ap.add_argument(
        "--fullgraph-cap",
        default="",
        help="also run the fullgraph engine capped so (fraction:K from the first engine's "
        "uncapped run): it trains within the cap or refuses at start",
    )
    ap.add_argument("--engines", default="minibatch,averaging")
    ap.add_argument(
        "--node-orders",
        default="degree,id",
        help="store node orders to compare (shoal store build --node-order)",
    )
    ap.add_argument(
        "--no-pack-ablation",
        action="store_true",
        help="skip the capped averaging run with --pack-epochs 0",
    )
    ap.add_argument(
        "--eval-halo-ablation",
        action="store_true",
        help="also run the capped minibatch engine with --eval-halo stored (each rank sweeps "
        "its halo rows for every block of the evaluation instead of having them served)",
    )
    ap.add_argument(
        "--pack-epochs",
        type=int,
        default=None,
        help="--pack-epochs for the capped runs (default: the engines' default)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS / "out_of_core_engines")
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="re-render <out>.md from <out>.json without running anything",
    )
    a = ap.parse_args()
    if a.report_only:
        report(json.loads(a.out.with_suffix(".json").read_text()), a.out.with_suffix(".md"))
        return
    a.work.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    g = prepare(a.work, log)
    orders = a.node_orders.split(",")
    stores = {o: build_store(g, a.work, log, o) for o in orders}
    load = open("/proc/loadavg").read().split()[:3]
    runs = []
    for engine in a.engines.split(","):
        base = None
        for i, o in enumerate(orders):  # uncapped once, with the first (default) order
            if i == 0:
                base = train(stores[o], a.work, engine, None, a.epochs, o)
                runs.append(base)
            cap = rank_cap(a.cap, base)
            runs.append(train(stores[o], a.work, engine, cap, a.epochs, o, a.pack_epochs, a.cap))
            if engine == "averaging" and i == 0 and not a.no_pack_ablation:
                runs.append(train(stores[o], a.work, engine, cap, a.epochs, o, 0, a.cap))
            if engine == "minibatch" and i == 0 and a.eval_halo_ablation:
                stored = ("--eval-halo", "stored")
                runs.append(
                    train(stores[o], a.work, engine, cap, a.epochs, o, a.pack_epochs, a.cap, stored)
                )
    if a.fullgraph_cap:  # within the cap, or refused at start naming the memory it needs
        o = orders[0]
        base = next((r for r in runs if r["cap"] is None and "train" in r), None)
        cap = rank_cap(a.fullgraph_cap, base)
        runs.append(
            train(stores[o], a.work, "fullgraph", cap, a.epochs, o, cap_spec=a.fullgraph_cap)
        )
    res = {
        "command": command_line("out_of_core_engines.py"),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine_line(),
        "load_before": " ".join(load),
        "epochs": a.epochs,
        "prepare": log,
        "runs": runs,
    }
    write_json(a.out.with_suffix(".json"), res, default=str)
    report(res, a.out.with_suffix(".md"))
    print(a.out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
