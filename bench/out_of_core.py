"""Out-of-core training: the same run uncapped and inside memory cgroups smaller than the data.

    python bench/out_of_core.py --graph 2m [--epochs 4] [--caps 1.5GiB]
    python bench/out_of_core.py --graph 10m [--epochs 3] [--caps 'fraction:8']
        [--structure-disk-caps CAPS] [--no-pack-caps CAPS] [--degree-cache-caps CAPS]
        [--report-only]

Graphs (built once under ``--work``):

- ``2m`` (issue 33): ``shoal data synth dcsbm --nodes 2000000 --edges 10000000 --features
  256 --classes 16 --train-frac 0.02 --val-frac 0.005`` (features 2.0 GB);
- ``10m`` (issue 11): ``shoal data synth dcsbm --nodes 10000000 --edges 50000000
  --features 128 --classes 16 --train-frac 0.01 --val-frac 0.002`` (features 5.1 GB).

Runs, back to back, ``shoal train --graph G --model sage --fanouts 10,5 --hidden 128 --epochs
E --eval-every E --threads 2`` uncapped and under each cap (``bench/cgroup.py``: a cgroup-v1
memory group whose limit covers the process and its page cache; the graph's page cache is
dropped before each run). A cap is a size (``1.5GiB``) or ``fraction:K``: a K-th of the
features plus the process footprint the uncapped run measured (its memory plan's reserve:
the interpreter, libraries and model measured at start plus one batch's working memory, and
the structure's row index, held in any case). Optionally once more with the CSR on disk
(``--structure disk``), without packing epochs (``--pack-epochs 0``) and with the static
cache chosen by in-degree instead of by pre-sampling (``--cache-policy degree``). Each graph's runs
are a section of ``bench/results/out_of_core.{md,json}`` (running one graph keeps the other's
section; ``--report-only`` rewrites the markdown from the JSON). Next to each run: the
disk's measured limits (``bench/results/disk.json``, ``python bench/disk.py``): the epoch's
bytes read at the sequential bandwidth, against the epoch's time waiting for I/O.
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
    load_json,
    machine_line,
    parse_size,
    run_capped,
    write_json,
    write_text_atomic,
)

GiB = 1 << 30
GRAPHS = {
    "2m": {
        "issue": 33,
        "synth": [
            *("--nodes", "2000000", "--edges", "10000000", "--features", "256"),
            *("--classes", "16", "--train-frac", "0.02", "--val-frac", "0.005"),
        ],
        "what": "2M nodes, 20M stored edges, 256 float32 features = 2.0 GB",
    },
    "10m": {
        "issue": 11,
        "synth": [
            *("--nodes", "10000000", "--edges", "50000000", "--features", "128"),
            *("--classes", "16", "--train-frac", "0.01", "--val-frac", "0.002"),
        ],
        "what": "10M nodes, 100M stored edges, 128 float32 features = 5.1 GB",
    },
}
#: the issue-11 graph's generator options (``bench/out_of_core_engines.py`` builds on it)
SYNTH = GRAPHS["10m"]["synth"]


def prepare(work: Path, log: list[str], graph: str = "10m") -> Path:
    g = work / f"g{graph}"
    if not (g / "meta.json").exists():
        cmd = [*SHOAL, "data", "synth", "dcsbm", *GRAPHS[graph]["synth"], "--out", str(g)]
        t0 = time.perf_counter()
        subprocess.run([*cmd, "--overwrite"], check=True, cwd=ROOT)
        log.append(f"{shlex.join(cmd[2:])}  # {time.perf_counter() - t0:.0f} s")
    return g


def footprint(run: dict) -> int | None:
    """The process footprint a run measured: its memory plan's reserve and the structure's
    row index (both held whatever the budget)."""
    plan = ((run.get("train") or {}).get("config") or {}).get("memory_plan") or {}
    if "reserve" not in plan:
        return None
    return int(plan["reserve"]) + int(plan.get("index_bytes") or 0)


def cap_bytes(cap: str, g: Path, base: dict | None) -> int:
    """``cap`` in bytes: a size, or ``fraction:K`` (a K-th of the features plus the
    footprint ``base``, the uncapped run, measured)."""
    if not cap.startswith("fraction:"):
        return parse_size(cap)
    k = float(cap.split(":", 1)[1])
    fp = footprint(base or {})
    if fp is None:
        raise SystemExit(f"cap {cap} needs the uncapped run's memory plan")
    features = (g / "features.npy").stat().st_size
    return int(features / k) + fp


def train(g: Path, work: Path, tag: str, cap: int | None, epochs: int, extra: list[str]) -> dict:
    out = work / f"train-{g.name}-{tag.replace(' ', '-').replace(',', '')}.json"
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


def _disk() -> dict:
    """The disk's measured limits (``bench/disk.py``), or {} before it was run."""
    return load_json(RESULTS / "disk.json")


def _epochs(t: dict) -> dict:
    """Per-epoch figures of a run's history: seconds, bytes read and the distinct rows'
    bytes (GB), io wait, written, hit rate, CSR read."""
    hist = t["history"]
    io = [h.get("io") or {} for h in hist]
    return {
        "seconds": [h["seconds"] for h in hist],
        "read": [i.get("bytes_read", 0) / 1e9 for i in io],
        "unique": [(i.get("unique_bytes") or 0) / 1e9 for i in io],
        "written": [(i.get("bytes_written") or 0) / 1e9 for i in io],
        "hit": [i.get("cache_hit_rate") or 0 for i in io],
        "wait": [h["time_split"].get("io_wait", 0.0) for h in hist],
        "csr": [(i.get("structure_bytes_read") or 0) / 1e9 for i in io],
    }


def _cap_text(r: dict) -> str:
    if not r["cap"]:
        return "none"
    text = f"{r['cap'] / GiB:.2f} GiB"
    return f"{text} ({r['cap_spec']})" if r.get("cap_spec", "").startswith("fraction") else text


def _row(r: dict, seq_bw: float | None) -> str:
    cg = r.get("cgroup", {})
    t = r.get("train")
    if t is None:
        return (
            f"| {r['tag']} | {_cap_text(r)} | failed (rc {r['returncode']}, OOM kills "
            f"{cg.get('oom_kill')}) |" + " |" * 16
        )
    e = _epochs(t)
    med = statistics.median
    rd_med, rd_mean = med(e["read"]), statistics.mean(e["read"])
    uq = med(e["unique"])
    amp = f"{rd_med / uq:.2f} / {rd_mean / uq:.2f}" if uq else "-"
    disk = f"{rd_med * 1e9 / seq_bw:.1f}" if seq_bw else "-"
    fit = (t.get("config", {}).get("memory_plan") or {}).get("fit") or {}
    mode = f"{fit['mode']}, cache {fit['cache_bytes'] / GiB:.2f} GiB" if fit else "-"
    peak = cg.get("peak_sampled", {}).get("rss+cache")
    peak_s = f"{peak / GiB:.2f}" if peak else "-"
    return (
        f"| {r['tag']} | {_cap_text(r)} | {r['seconds']:.0f} | "
        f"{' / '.join(f'{x:.1f}' for x in e['seconds'])} | {med(e['seconds']):.1f} | "
        f"{_mean_epoch(t):.1f} | {t['eval_seconds']:.0f} | {t['val_accuracy']:.4f} | "
        f"{t['test_accuracy']:.4f} | {rd_med:.2f} / {rd_mean:.2f} | {uq:.2f} | {amp} | "
        f"{statistics.mean(e['written']):.2f} | {med(e['hit']):.2f} | {med(e['wait']):.1f} | "
        f"{disk} | {r.get('read_bytes', 0) / 1e9:.1f} | {med(e['csr']):.2f} | {mode} | {peak_s} |"
    )


def _mean_epoch(t: dict) -> float:
    """Mean epoch seconds, the reading done when the run starts (before the first epoch:
    the cache, the first window, and the sweep packing the first epochs) included."""
    hist = t["history"]
    start = sum((h.get("io") or {}).get("start_seconds") or 0.0 for h in hist)
    return (sum(h["seconds"] for h in hist) + start) / len(hist)


HEADER = (
    "| run | cap | wall s | epoch seconds | median | mean | eval seconds | val acc | test acc "
    "| read GB/epoch (median / mean) | distinct rows GB/epoch | read / distinct (median / mean) "
    "| written GB/epoch | cache hit rate | io wait s/epoch | read at seq. bandwidth s/epoch "
    "| run read GB (all) | CSR read GB/epoch | window fit | peak GiB |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def section(name: str, res: dict) -> list[str]:
    """The markdown of one graph's runs."""
    spec = GRAPHS[name]
    runs = res["runs"]
    disk = _disk()
    seq = disk.get("sequential_bytes_per_s")
    rnd = disk.get("random_4k") or {}
    limits = (
        f"Disk (`{disk.get('command', 'python bench/disk.py')}`): sequential reads "
        f"{seq / 1e9:.2f} GB/s; random 4 KiB direct reads "
        + ", ".join(f"{v['bytes_per_s'] / 1e6:.0f} MB/s at queue depth {k}" for k, v in rnd.items())
        + "."
        if seq
        else "Disk limits: not measured (`python bench/disk.py`)."
    )
    base = next((r for r in runs if r["tag"] == "uncapped" and "train" in r), None)
    lines = [
        f"## {name}: {spec['what']} (issue {spec['issue']})",
        "",
        f"Command: `{res['command']}` ({res['date']}, {res['machine']}, load before "
        f"{res['load_before']}).",
        "",
        "Graph: `shoal data synth dcsbm " + " ".join(spec["synth"]) + "`. Train: GraphSAGE "
        f"10,5 hidden 128, batch 1024, {res['epochs']} epochs, exact evaluation after the "
        "last epoch on val, then on val+test with the best weights.",
        "",
        limits,
        "",
        HEADER,
    ]
    lines += [_row(r, seq) for r in runs]
    lines.append("")
    for r in runs:
        t = r.get("train")
        if t is None or base is None or r is base:
            continue
        e, e0 = _epochs(t), _epochs(base["train"])
        med = statistics.median
        uq = med(e["unique"])
        lines.append(
            f"- {r['tag']}: epoch {med(e['seconds']) / med(e0['seconds']):.2f}x the uncapped "
            f"epoch (median; mean with the start's reads "
            f"{_mean_epoch(t) / _mean_epoch(base['train']):.2f}x), evaluation "
            f"{t['eval_seconds'] / base['train']['eval_seconds']:.2f}x the uncapped evaluation; "
            f"bytes read per epoch {med(e['read']) / uq:.2f}x the distinct rows' bytes (median; "
            f"mean with the start's sweep {statistics.mean(e['read']) / uq:.2f}x); "
            f"same accuracy: {t['test_accuracy'] == base['train']['test_accuracy']}."
        )
    lines += ["", "Preparation: " + ("; ".join(res["prepare"]) or "graph already built"), ""]
    return lines


def report(allres: dict, path: Path) -> None:
    lines = [
        "# Out-of-core training",
        "",
        "Each run starts with the graph's page cache dropped; capped runs run in a cgroup-v1 "
        "memory group whose limit covers the process and its page cache. `wall s`: the whole "
        "command (start, training, both evaluations). Per-epoch figures are medians over the "
        "epochs, `mean` adds the reading done at the start of the run (the cache, and the "
        "sweep that packs the first epochs' rows) to the epochs. Bytes read per epoch: the "
        "feature rows read by the epoch's windows, plus, in the epoch whose sweep packed it, "
        "that sweep (median: an epoch reading its pack; mean: with the sweeps). `distinct "
        "rows`: the bytes of the distinct feature rows the epoch's batches needed. `written`: "
        "pack files (one sweep reads the rows of up to 4 epochs and writes each epoch's "
        "windows' rows in first-use order, one contiguous segment per window). `run read "
        "GB`: all the bytes the process read from disk (evaluation included). `window fit`: "
        "how the cache and the window slots were sized from the first sampled epoch. `CSR "
        "read`: neighbour-list bytes read by the sampler when the structure is on disk.",
        "",
    ]
    for name in GRAPHS:
        if name in allres["graphs"]:
            lines += section(name, allres["graphs"][name])
    write_text_atomic(path, "\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", choices=sorted(GRAPHS), default="2m")
    ap.add_argument("--work", type=Path, default=WORK / "ooc")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument(
        "--caps",
        default="1.5GiB",
        help="comma-separated cgroup caps: sizes, or fraction:K (a K-th of the features "
        "plus the footprint the uncapped run measured)",
    )
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
    ap.add_argument(
        "--degree-cache-caps",
        default="",
        help="comma-separated caps at which to run once more with the static cache chosen by "
        "in-degree (--cache-policy degree) instead of by pre-sampling (the default)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS / "out_of_core")
    ap.add_argument("--report-only", action="store_true", help="rewrite the markdown only")
    a = ap.parse_args()
    js = a.out.with_suffix(".json")
    allres = load_json(js, {"graphs": {}})
    allres.setdefault("graphs", {})
    if not a.report_only:
        a.work.mkdir(parents=True, exist_ok=True)
        log: list[str] = []
        g = prepare(a.work, log, a.graph)
        load = open("/proc/loadavg").read().split()[:3]
        runs = [train(g, a.work, "uncapped", None, a.epochs, [])]
        todo = [(c, []) for c in a.caps.split(",") if c]
        todo += [(c, ["--structure", "disk"]) for c in a.structure_disk_caps.split(",") if c]
        todo += [(c, ["--pack-epochs", "0"]) for c in a.no_pack_caps.split(",") if c]
        todo += [(c, ["--cache-policy", "degree"]) for c in a.degree_cache_caps.split(",") if c]
        for cap, extra in todo:
            tag = f"capped {cap}" + (f", {' '.join(extra)}" if extra else "")
            r = train(g, a.work, tag, cap_bytes(cap, g, runs[0]), a.epochs, extra)
            r["cap_spec"] = cap
            runs.append(r)
        allres["graphs"][a.graph] = {
            "command": command_line("out_of_core.py"),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": machine_line(),
            "load_before": " ".join(load),
            "epochs": a.epochs,
            "prepare": log,
            "runs": runs,
        }
        write_json(js, allres, default=str)
    report(allres, a.out.with_suffix(".md"))
    print(a.out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
