"""Out-of-core training: the same run uncapped and inside a memory cgroup smaller than the data.

    python bench/out_of_core.py [--work bench/work/ooc] [--epochs 2] [--caps 4GiB,3GiB]
        [--structure-disk-caps 4GiB] [--no-pack-caps 4GiB]

Builds (once) the issue-11 graph: ``shoal data synth dcsbm --nodes 10000000 --edges 50000000
--features 128 --classes 16 --train-frac 0.01 --val-frac 0.002`` (10M nodes, 100M stored
edges, features 5.1 GB), then runs, back to back, ``shoal train --graph G --model sage
--fanouts 10,5 --hidden 128 --epochs E --eval-every E --threads 2`` uncapped and under each
cap (``bench/cgroup.py``: a cgroup-v1 memory group whose limit covers the process and its page
cache; the graph's page cache is dropped before each run), once more with the CSR on disk
(``--structure disk``) at each of ``--structure-disk-caps`` and without packing epochs
(``--pack-epochs 0``; by default one sweep reads the rows of 4 epochs into pack files) at
each of ``--no-pack-caps``. Writes
``bench/results/out_of_core.{md,json}``: per-epoch seconds, evaluation seconds, accuracies,
bytes read per epoch next to the bytes of the unique rows the epoch needed, cache hit rate,
time waiting for I/O, and the cgroup's peak memory.
"""

from __future__ import annotations

import argparse
import json
import shlex
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
    machine_line,
    parse_size,
    run_capped,
    write_json,
    write_text_atomic,
)

GiB = 1 << 30
SYNTH = [
    "--nodes",
    "10000000",
    "--edges",
    "50000000",
    "--features",
    "128",
    "--classes",
    "16",
    "--train-frac",
    "0.01",
    "--val-frac",
    "0.002",
]


def prepare(work: Path, log: list[str]) -> Path:
    g = work / "g10m"
    if not (g / "meta.json").exists():
        cmd = [*SHOAL, "data", "synth", "dcsbm", *SYNTH, "--out", str(g), "--overwrite"]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=ROOT)
        log.append(f"{shlex.join(cmd[2:])}  # {time.perf_counter() - t0:.0f} s")
    return g


def train(g: Path, work: Path, tag: str, cap: int | None, epochs: int, extra: list[str]) -> dict:
    out = work / f"train-{tag.replace(' ', '-')}.json"
    out.unlink(missing_ok=True)
    cmd = [
        *SHOAL,
        "train",
        "--graph",
        str(g),
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
        "2",
        "--no-progress",
        "--json",
        str(out),
        *extra,
    ]
    print(f"[{tag}] {shlex.join(cmd[2:])}", flush=True)
    res = run_capped(cmd, cap, evict_paths=[g], cwd=ROOT, timeout=3600)
    res["tag"] = tag
    res["cap"] = cap
    if res["returncode"] == 0 and out.exists():
        res["train"] = json.loads(out.read_text())
    print(f"[{tag}] rc={res['returncode']} {res['seconds']:.0f} s", flush=True)
    return res


def _row(r: dict) -> str:
    cg = r.get("cgroup", {})
    t = r.get("train")
    cap = f"{r['cap'] / GiB:.0f} GiB" if r["cap"] else "none"
    if t is None:
        return (
            f"| {r['tag']} | {cap} | failed (rc {r['returncode']}, OOM kills {cg.get('oom_kill')}) |"
            + " |" * 13
        )
    hist = t["history"]
    ep = [h["seconds"] for h in hist]
    io = [h.get("io", {}) for h in hist]
    rd = statistics.mean([i.get("bytes_read", 0) for i in io]) / 1e9
    wr = statistics.mean([i.get("bytes_written", 0) or 0 for i in io]) / 1e9
    uq = statistics.median([i.get("unique_bytes", 0) or 0 for i in io]) / 1e9
    hit = statistics.median([i.get("cache_hit_rate") or 0 for i in io])
    wait = statistics.median([h["time_split"].get("io_wait", 0.0) for h in hist])
    csr = statistics.median([i.get("structure_bytes_read", 0) or 0 for i in io]) / 1e9
    fit = (t.get("config", {}).get("memory_plan") or {}).get("fit") or {}
    mode = f"{fit['mode']}, cache {fit['cache_bytes'] / GiB:.2f} GiB" if fit else "-"
    peak = cg.get("peak_sampled", {}).get("rss+cache")
    peak_s = f"{peak / GiB:.2f}" if peak else "-"
    return (
        f"| {r['tag']} | {cap} | {r['seconds']:.0f} | {' / '.join(f'{s:.1f}' for s in ep)} | "
        f"{statistics.median(ep):.1f} | {_mean_epoch(t):.1f} | {t['eval_seconds']:.0f} | "
        f"{t['val_accuracy']:.4f} | {t['test_accuracy']:.4f} | {rd:.2f} | {wr:.2f} | {uq:.2f} | "
        f"{hit:.2f} | {wait:.1f} | "
        f"{csr:.2f} | {mode} | {peak_s} |"
    )


def _mean_epoch(t: dict) -> float:
    """Mean epoch seconds, the reading done when the run starts (before the first epoch:
    the cache, the first window, and the sweep packing the first epochs) included."""
    hist = t["history"]
    start = sum((h.get("io") or {}).get("start_seconds") or 0.0 for h in hist)
    return (sum(h["seconds"] for h in hist) + start) / len(hist)


def report(res: dict, path: Path) -> None:
    runs = res["runs"]
    base = next((r for r in runs if r["tag"] == "uncapped" and "train" in r), None)
    lines = [
        "# Out-of-core training (issue 11)",
        "",
        f"Command: `{res['command']}` ({res['date']}, {res['machine']}, load before "
        f"{res['load_before']}).",
        "",
        "Graph: `shoal data synth dcsbm " + " ".join(SYNTH) + "` (10M nodes, 100M stored edges, "
        "128 float32 features = 5.1 GB). Train: GraphSAGE 10,5 hidden 128, batch 1024 (98 "
        f"batches/epoch), {res['epochs']} epochs, evaluation (exact, all 10M nodes) after the "
        "last epoch on val and then on val+test with the best weights. Each run starts with "
        "the graph's page cache dropped; capped runs run in a cgroup-v1 memory group whose "
        "limit covers the process and its page cache. `wall s`: the whole command (start, "
        "training, both evaluations). Per-epoch figures are medians over the epochs except "
        "`mean` and the GB read / written (means); the first capped epoch's rows (and, with "
        "packing, those of the epochs packed with it) are read at the start of the run in "
        "the same pass as the cache, before the first epoch: `mean` adds that time to the "
        "epochs'. `written`: pack files (one sweep reads the rows of up to 4 epochs into a "
        "file per epoch, which the epoch's windows then read). `window fit`: how the cache and the window slots were sized "
        "from the first sampled epoch (`overlap`: an epoch's rows fit one slot and are read "
        "while the previous epoch trains; `one`: one window per epoch, read before it "
        "trains; `split`: several windows per epoch). `CSR read`: neighbour-list bytes read "
        "from disk by the sampler (`--structure disk`).",
        "",
        "| run | cap | wall s | epoch seconds | median | mean | eval seconds | val acc | "
        "test acc | read GB/epoch | written GB/epoch | unique rows GB/epoch | cache hit rate | "
        "io wait s/epoch | CSR read GB/epoch | window fit | peak GiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_row(r) for r in runs]
    lines.append("")
    for r in runs:
        t = r.get("train")
        if t is None or base is None or r is base:
            continue
        e = statistics.median(h["seconds"] for h in t["history"])
        e0 = statistics.median(h["seconds"] for h in base["train"]["history"])
        m, m0 = _mean_epoch(t), _mean_epoch(base["train"])
        lines.append(
            f"- {r['tag']}: epoch {e / e0:.2f}x the uncapped epoch (median; mean with the "
            f"start's reads {m / m0:.2f}x), evaluation "
            f"{t['eval_seconds'] / base['train']['eval_seconds']:.2f}x the uncapped evaluation, "
            f"same accuracy: {t['test_accuracy'] == base['train']['test_accuracy']}."
        )
    lines += ["", "Preparation: " + ("; ".join(res["prepare"]) or "graph already built"), ""]
    write_text_atomic(path, "\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=WORK / "ooc")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--caps", default="4GiB,3GiB", help="comma-separated cgroup caps")
    ap.add_argument(
        "--structure-disk-caps",
        default="",
        help="comma-separated caps at which to run once more with the CSR left on disk "
        "(--structure disk: sampled neighbour entries read with planned direct reads)",
    )
    ap.add_argument(
        "--no-pack-caps",
        default="",
        help="comma-separated caps at which to run once more without packing epochs "
        "(--pack-epochs 0: every window sweeps the feature file)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS / "out_of_core")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    g = prepare(a.work, log)
    load = open("/proc/loadavg").read().split()[:3]
    runs = [train(g, a.work, "uncapped", None, a.epochs, [])]
    for cap in a.caps.split(","):
        runs.append(train(g, a.work, f"capped {cap}", parse_size(cap), a.epochs, []))
    for cap in filter(None, a.structure_disk_caps.split(",")):
        runs.append(
            train(
                g,
                a.work,
                f"capped {cap}, CSR on disk",
                parse_size(cap),
                a.epochs,
                ["--structure", "disk"],
            )
        )
    for cap in filter(None, a.no_pack_caps.split(",")):
        runs.append(
            train(
                g,
                a.work,
                f"capped {cap}, --pack-epochs 0",
                parse_size(cap),
                a.epochs,
                ["--pack-epochs", "0"],
            )
        )
    res = {
        "command": command_line("out_of_core.py"),
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
