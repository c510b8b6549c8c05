"""Out-of-core training: one process uncapped, then inside memory cgroups smaller than its data.

    python bench/out_of_core.py --graph 2m --epochs 4 --caps 1.5GiB
        [--structure-disk-caps CAPS] [--no-pack-caps CAPS] [--degree-cache-caps CAPS]
    python bench/out_of_core.py --graph 10m --epochs 3 --caps 4GiB,fraction:8
    python bench/out_of_core.py --report-only

Graphs: ``common.GRAPHS`` ``2m`` (issue 33) and ``10m`` (issue 11), built once under WORK.
Runs, back to back, ``shoal train --graph G --model sage --fanouts 10,5 --hidden 128 --epochs
E --eval-every E --threads 2 --json`` uncapped and under each cap: a cgroup-v1 memory group
whose limit covers the process and its page cache (``common.run_capped``; the graph's page
cache is dropped before each run; not ``common.train``, which runs no cgroup). A cap is a
size (``1.5GiB``) or ``fraction:K``: a K-th of the features plus the footprint the uncapped
run measured (``common.cap_bytes``). The ablations run once more at their caps with the CSR
on disk (``--structure disk``), without packing epochs (``--pack-epochs 0``), or with the
static cache chosen by in-degree instead of by pre-sampling (``--cache-policy degree``).

Each graph's runs are a section of ``bench/results/out_of_core.{md,json}`` (running one graph
keeps the other's), with the disk's limits as ``bench/disk.py`` had measured them: the
epoch's bytes read at the sequential bandwidth, against its time waiting for I/O.
``--smoke``: the smoke graph, 2 epochs, uncapped and once at 1 GiB with every ablation's
flags.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import time
from pathlib import Path

from common import (
    GRAPHS,
    ROOT,
    SHOAL,
    WORK,
    bench_args,
    cap_bytes,
    caps_available,
    disk_limits,
    disk_line,
    header,
    load_json,
    out_prefix,
    record_command,
    run_capped,
    synth_flags,
    synth_graph,
    write_results,
)

GiB = 1 << 30
ISSUES = {"2m": 33, "10m": 11}
#: the ablations' options and the ``shoal train`` flags of their runs
ABLATIONS = {
    "structure_disk_caps": ["--structure", "disk"],
    "no_pack_caps": ["--pack-epochs", "0"],
    "degree_cache_caps": ["--cache-policy", "degree"],
}
MODEL = ["--model", "sage", "--fanouts", "10,5", "--hidden", "128", "--threads", "2"]


def train(g: Path, tag: str, cap: int | None, epochs: int, extra: list[str]) -> dict:
    out = WORK / "out_of_core" / f"{g.name}-{tag.replace(' ', '-').replace(',', '')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    cmd = [*SHOAL, "train", "--graph", str(g), *MODEL, "--epochs", str(epochs)]
    cmd += ["--eval-every", str(epochs), "--no-progress", "--json", str(out), *extra]
    print(f"[{tag}] {shlex.join(cmd[2:])}", flush=True)
    name = f"out_of_core_{os.getpid()}"
    res = run_capped(cmd, cap, name=name, evict_paths=[g], cwd=ROOT, timeout=3600)
    res.update(tag=tag, cap=cap)
    if res["returncode"] == 0 and out.exists():
        res["train"] = json.loads(out.read_text())
    print(f"[{tag}] rc={res['returncode']} {res['seconds']:.0f} s", flush=True)
    return res


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


def _mean_epoch(t: dict) -> float:
    """Mean epoch seconds, the reading done when the run starts (before the first epoch:
    the cache, the first window, and the sweep packing the first epochs) included."""
    hist = t["history"]
    start = sum((h.get("io") or {}).get("start_seconds") or 0.0 for h in hist)
    return (sum(h["seconds"] for h in hist) + start) / len(hist)


def _structure_text(t: dict) -> str:
    """Where a run's memory plan kept the CSR, and its bytes."""
    plan = (t.get("config") or {}).get("memory_plan") or {}
    where = "held in memory" if plan.get("structure_in_memory", True) else "on disk"
    return f"CSR {where}, {(plan.get('structure') or 0) / 1e9:.2f} GB with its row index"


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
        f"{disk} | {r.get('read_bytes', 0) / 1e9:.1f} | {med(e['csr']):.2f} / "
        f"{statistics.mean(e['csr']):.2f} | {mode} | {peak_s} |"
    )


TABLE = (
    "| run | cap | wall s | epoch seconds | median | mean | eval seconds | val acc | test acc "
    "| read GB/epoch (median / mean) | distinct rows GB/epoch | read / distinct (median / mean) "
    "| written GB/epoch | cache hit rate | io wait s/epoch | read at seq. bandwidth s/epoch "
    "| run read GB (all) | CSR read GB/epoch (median / mean) | window fit | peak GiB |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def section(name: str, s: dict) -> list[str]:
    """The markdown of one graph's runs."""
    gr, runs = s["graph"], s["runs"]
    what = (
        f"{gr['nodes']:,} nodes, {gr['edges']:,} stored edges, {gr['features']} float32 "
        f"features = {gr['feature_bytes'] / 1e9:.2f} GB"
    )
    issue = f" (issue {ISSUES[name]})" if name in ISSUES else ""
    lines = [
        f"## {name}: {what}{issue}",
        "",
        f"Command: `{s['command']}` ({s['date']}, {s['machine']}).",
        "",
        f"Graph: `{gr['synth']}`. Train: GraphSAGE 10,5 hidden 128, batch 1024, {s['epochs']} "
        "epochs, exact evaluation after the last epoch on val, then on val+test with the best "
        "weights.",
        "",
        disk_line(s["disk"]),
        "",
        TABLE,
    ]
    lines += [_row(r, s["disk"].get("sequential_bytes_per_s")) for r in runs]
    lines.append("")
    base = next((r for r in runs if r["tag"] == "uncapped" and "train" in r), None)
    for r in runs:
        t = r.get("train")
        if t is None or base is None or r is base:
            continue
        e, e0 = _epochs(t), _epochs(base["train"])
        med = statistics.median
        uq = med(e["unique"]) or float("nan")
        lines.append(
            f"- {r['tag']}: epoch {med(e['seconds']) / med(e0['seconds']):.2f}x the uncapped "
            f"epoch (median; mean with the start's reads "
            f"{_mean_epoch(t) / _mean_epoch(base['train']):.2f}x), evaluation "
            f"{t['eval_seconds'] / base['train']['eval_seconds']:.2f}x the uncapped evaluation; "
            f"bytes read per epoch {med(e['read']) / uq:.2f}x the distinct rows' bytes (median; "
            f"mean with the start's sweep {statistics.mean(e['read']) / uq:.2f}x); "
            f"neighbour lists read from disk {statistics.mean(e['csr']):.2f} GB per epoch "
            f"(mean, the start's sampling ahead included; {_structure_text(t)}) beside "
            f"{statistics.mean(e['read']):.2f} GB of feature rows; "
            f"same accuracy: {t['test_accuracy'] == base['train']['test_accuracy']}."
        )
    return lines + [""] + dgl_lines(name, runs)


def dgl_lines(name: str, runs: list[dict]) -> list[str]:
    """DGL + mmap on the same graph (``bench/results/dgl_mmap.json``, ``bench/dgl_mmap.py``)
    and shoal's median epoch against DGL's at each cap both ran."""
    import dgl_mmap

    s = load_json(ROOT / "bench/results/dgl_mmap.json", {"graphs": {}})["graphs"].get(name)
    if not s or s.get("skipped"):
        return []
    lines = [
        f"DGL + mmap on the same graph and model (`{s['command']}`, {s['date']}; DGL "
        f"{s.get('dgl')}, torch {s.get('torch')}: the structure in a `DGLGraph`, the features "
        "memory-mapped, [dgl_mmap.md](dgl_mmap.md)):",
        "",
        dgl_mmap.TABLE,
        *[dgl_mmap._row(r) for r in s["runs"]],
        "",
    ]
    for d in s["runs"]:
        ours = next((r for r in runs if r["tag"] == d["tag"] and "train" in r), None)
        hist = (d.get("dgl") or {}).get("history") or []
        if ours is None:
            continue
        mine = statistics.median(_epochs(ours["train"])["seconds"])
        if not hist:  # stopped before its first epoch ended: a lower bound
            lines.append(
                f"- {d['tag']}: DGL + mmap finished no epoch in {d['seconds']:.0f} s "
                f"({d.get('read_bytes', 0) / 1e9:.0f} GB read) against shoal's {mine:.1f} s "
                f"epoch: shoal **at least {d['seconds'] / mine:.0f}x** faster."
            )
            continue
        theirs = statistics.median(h["seconds"] for h in hist)
        lines.append(
            f"- {d['tag']}: DGL + mmap's median epoch {theirs:.1f} s against shoal's "
            f"{mine:.1f} s: shoal **{theirs / mine:.1f}x** faster."
        )
    return lines + [""]


def render(res: dict) -> str:
    lines = header(
        "Out-of-core training",
        res,
        "Each run starts with the graph's page cache dropped; capped runs run in a cgroup-v1 "
        "memory group whose limit covers the process and its page cache. `wall s`: the whole "
        "command (start, training, both evaluations). Per-epoch figures are medians over the "
        "epochs, `mean` adds the reading done at the start of the run to the epochs (capped: "
        "the cache and the sweep that packs the first epochs' rows; uncapped: reading every "
        "row into memory, counted since 2026-11-29). Bytes read per epoch: the "
        "feature rows read by the epoch's windows, plus, in the epoch whose sweep packed it, "
        "that sweep (median: an epoch reading its pack; mean: with the sweeps). `distinct "
        "rows`: the bytes of the distinct feature rows the epoch's batches needed. `written`: "
        "pack files (one sweep reads the rows of up to 4 epochs and writes each epoch's "
        "windows' rows in first-use order, one contiguous segment per window). `run read "
        "GB`: all the bytes the process read from disk (evaluation included). `window fit`: "
        "how the cache and the window slots were sized from the first sampled epoch. `CSR "
        "read`: neighbour-list bytes the sampler read from disk per epoch (the structure on disk; "
        "the start's sampling ahead counted in the first epoch, a sweep's in the epoch it "
        "runs beside, so the mean holds them all; 0 when the plan holds the CSR in memory).",
    )
    for name, s in res["graphs"].items():
        lines += section(name, s)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench_args(ap, out="bench/results/out_of_core")
    ap.add_argument("--graph", choices=sorted(ISSUES), default="2m")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument(
        "--caps",
        default="1.5GiB",
        help="comma-separated cgroup caps: sizes, or fraction:K (a K-th of the features "
        "plus the footprint the uncapped run measured)",
    )
    for opt, flags in ABLATIONS.items():
        ap.add_argument(
            "--" + opt.replace("_", "-"),
            default="",
            help=f"comma-separated caps at which to run once more with {' '.join(flags)}",
        )
    ap.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    a = ap.parse_args()
    prefix = out_prefix(a, "bench/results/out_of_core")
    res = load_json(prefix.with_suffix(".json"), {"graphs": {}})
    if a.report_only:
        write_results(prefix, res, render)
        return
    name, epochs = ("smoke", 2) if a.smoke else (a.graph, a.epochs)
    todo = [(c, []) for c in a.caps.split(",") if c]
    for opt, flags in ABLATIONS.items():
        todo += [(c, flags) for c in getattr(a, opt).split(",") if c]
    if a.smoke:  # every ablation's flags in one capped run (any fraction of the tiny
        # graph's features is below shoal's least working set)
        todo = [("1GiB", [f for flags in ABLATIONS.values() for f in flags])]
    capped = caps_available(a.smoke)
    record_command(res, name, "out_of_core.py")  # the machine before the runs load it
    g = synth_graph(name)
    meta = json.loads((g / "meta.json").read_text())
    features = (g / "features.npy").stat().st_size
    start = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs = [train(g, "uncapped", None, epochs, [])]
    for spec, extra in todo:
        tag = f"capped {spec}" + (f", {' '.join(extra)}" if extra else "")
        cap = cap_bytes(spec, features, runs[0].get("train")) if capped else None
        runs.append({**train(g, tag, cap, epochs, extra), "cap_spec": spec})
    res["graphs"][name] = {
        "command": res["commands"][name],
        "date": start,
        "machine": res["machine"],
        "epochs": epochs,
        "graph": {
            "synth": "shoal data synth dcsbm " + " ".join(synth_flags(GRAPHS[name])),
            "nodes": meta["num_nodes"],
            "edges": meta["num_edges"],
            "features": meta["feature_dim"],
            "feature_bytes": features,
        },
        "disk": disk_limits(),
        "runs": runs,
    }
    write_results(prefix, res, render)
    print(prefix.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
