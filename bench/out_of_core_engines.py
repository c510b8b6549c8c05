"""Out-of-core distributed training: 2 ranks uncapped, then each rank in its own memory cgroup.

    python bench/out_of_core_engines.py [--epochs 3] [--cap 2GiB] [--engines minibatch,averaging]
        [--node-orders degree,id] [--no-pack-ablation] [--eval-halo-ablation]
        [--pack-epochs K] [--fullgraph-cap fraction:K] [--out bench/results/out_of_core_engines]
    python bench/out_of_core_engines.py --report-only [--out PREFIX]

Store: issue 11's graph (``common.GRAPHS["10m"]``) in 2 parts by ``shoal partition``'s
default partitioner, one store with halo features per node order (``shoal store build
--halo-features --node-order O``: ``id``, the store's default, original ID order; ``degree``,
each part's rows in descending in-degree). For each engine, back to back: ``shoal -v train
--store S --engine E --model sage --fanouts 10,5 --hidden 128 --epochs E --eval-every E
--threads 1 --json`` as 2 ranks, uncapped on the first node order's store, then capped on
every order's. The ranks are started directly with torchrun's environment (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``/``PORT``), not through ``shoal train --nproc 2``
(``common.train``): each rank runs in its own cgroup-v1 memory group
(``common.run_capped_each``; the cap covers the process and its page cache; the store's page
cache is dropped before each run). A cap is a size or ``fraction:K``: a K-th of the rank's
feature rows (core and halo, rank 0's memory plan in the engine's uncapped run) plus the
footprint that run measured. At the cap, on the first order's store: ``averaging`` again
with ``--pack-epochs 0`` (every window sweeps the feature file; unless
``--no-pack-ablation``), ``minibatch`` again with ``--eval-halo stored``
(``--eval-halo-ablation``), and the ``fullgraph`` engine (``--fullgraph-cap``: it trains
within the cap or refuses at start). The final evaluation's working memory, peak and rounds
come from the ranks' ``-v`` messages.

``--smoke``: the smoke graph, 1 epoch, two launches: ``averaging`` uncapped on the id-ordered
store, ``minibatch`` at 1.5 GiB per rank on the degree-ordered one with ``--pack-epochs 0``
and ``--eval-halo stored``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import socket
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
    new_results,
    out_prefix,
    run_capped_each,
    shoal,
    synth_flags,
    synth_graph,
    write_results,
)

GiB = 1 << 30


def build_store(g: Path, order: str) -> Path:
    """``g`` in 2 parts by ``shoal partition``'s default partitioner (``common``'s
    ``partitioned_store`` always names an ``--algo``), stored with halo features in node
    order ``order``; both built once."""
    a, s = g.with_name(f"{g.name}-part2"), g.with_name(f"{g.name}-part2-store-{order}")
    if not (a / "meta.json").exists():
        shoal("partition", g, "--parts", 2, "--out", a, "--overwrite", "-q")
    if not (s / "meta.json").exists():
        shoal(
            "store",
            "build",
            g,
            a,
            "--out",
            s,
            "--halo-features",
            "--node-order",
            order,
            "--overwrite",
            "-q",
        )
    return s


def plan_runs(a: argparse.Namespace) -> list[dict]:
    """The runs, in order: engine, node order, cap (spec; None: uncapped), ``--pack-epochs``
    and further flags."""
    if a.smoke:
        both = ["--eval-halo", "stored"]
        return [
            dict(engine="averaging", order="id", cap=None),
            dict(engine="minibatch", order="degree", cap="1.5GiB", pack=0, extra=both),
        ]
    orders, runs = a.node_orders.split(","), []
    for engine in a.engines.split(","):
        runs.append(dict(engine=engine, order=orders[0], cap=None))
        for i, o in enumerate(orders):
            runs.append(dict(engine=engine, order=o, cap=a.cap, pack=a.pack_epochs))
            if i == 0 and engine == "averaging" and not a.no_pack_ablation:
                runs.append(dict(engine=engine, order=o, cap=a.cap, pack=0))
            if i == 0 and engine == "minibatch" and a.eval_halo_ablation:
                extra = ["--eval-halo", "stored"]
                runs.append(
                    dict(engine=engine, order=o, cap=a.cap, pack=a.pack_epochs, extra=extra)
                )
    if a.fullgraph_cap:
        runs.append(dict(engine="fullgraph", order=orders[0], cap=a.fullgraph_cap))
    return runs


def rank_cap(spec: str, base: dict | None) -> int:
    """Each rank's cap in bytes (``common.cap_bytes`` of rank 0's feature rows, core and
    halo, in the uncapped run ``base``'s memory plan)."""
    plan = (((base or {}).get("train") or {}).get("config") or {}).get("memory_plan") or {}
    return cap_bytes(spec, int(plan.get("features") or 0), (base or {}).get("train"))


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(
    store: Path,
    engine: str,
    epochs: int,
    order: str,
    cap: int | None,
    cap_spec: str | None = None,
    pack: int | None = None,
    extra: list[str] = (),
) -> dict:
    if cap_spec is None:
        per_rank = "uncapped"
    elif cap is None:
        per_rank = f"{cap_spec} per rank, not applied (no cgroup)"
    else:
        per_rank = f"{cap / GiB:.2f} GiB per rank"
        per_rank += f" ({cap_spec})" if cap_spec.startswith("fraction:") else ""
    tag = f"{engine} {order} order {per_rank}"
    tag += "" if pack is None else f", --pack-epochs {pack}"
    tag += f", {' '.join(extra)}" if extra else ""
    kind = ("capped" if cap_spec else "uncapped") + "".join(f"-{x.lstrip('-')}" for x in extra)
    out = WORK / "out_of_core_engines" / f"{store.name}-{engine}-{kind}-pack{pack}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    cmd = [*SHOAL, "-v", "train", "--store", str(store), "--engine", engine]  # -v: memory logs
    cmd += ["--model", "sage", "--fanouts", "10,5", "--hidden", "128", "--epochs", str(epochs)]
    cmd += ["--eval-every", str(epochs), "--threads", "1", "--no-progress", "--json", str(out)]
    cmd += ([] if pack is None else ["--pack-epochs", str(pack)]) + list(extra)
    env = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
    env |= {"MASTER_PORT": str(_port()), "OMP_NUM_THREADS": "1"}
    cmds = [(cmd, {**env, "RANK": str(r), "LOCAL_RANK": str(r)}) for r in range(2)]
    print(f"[{tag}] {shlex.join(cmd[2:])}", flush=True)
    t0 = time.perf_counter()
    err = out.with_suffix(".stderr")
    with open(err, "w") as f:  # both ranks' messages: a refusal, the evaluation's memory
        ranks = run_capped_each(
            cmds,
            cap,
            name=f"ooc_engines_{os.getpid()}",
            evict_paths=[store],
            cwd=ROOT,
            timeout=3600,
            stderr=f,
        )
    log = err.read_text()
    res = {
        "tag": tag,
        "engine": engine,
        "order": order,
        "cap": cap,
        "pack": pack,
        "extra": list(extra),
        "cap_spec": cap_spec,
        "errors": [ln for ln in log.splitlines() if "error" in ln.lower()][-2:],
        "seconds": time.perf_counter() - t0,
        "ranks": ranks,
        "returncode": max(abs(r["returncode"]) for r in ranks),
        "eval_memory": eval_memory(log),
    }
    if res["returncode"] == 0 and out.exists():
        res["train"] = json.loads(out.read_text())
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


def _row(r: dict, seq: float | None) -> str:
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
    at_seq = f"{statistics.median([i.get('bytes_read', 0) for i in io]) / seq:.1f}" if seq else "-"
    return (
        f"| {r['tag']} | {r['seconds']:.0f} | {' / '.join(f'{s:.1f}' for s in ep)} | "
        f"{statistics.median(ep):.1f} | {statistics.mean(ep):.1f} | {t['eval_seconds']:.0f} | "
        f"{t['val_accuracy']:.4f} | {t['test_accuracy']:.4f} | {rd:.2f} | {wr:.2f} | "
        f"{uq:.2f} | {req:.2f} | {hit:.2f} | {wait:.1f} | {at_seq} | {peak_s} |"
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


def _eval_line(t: dict, base: dict, run: dict, seq: float | None) -> str:
    """What the capped run's final evaluation read (both ranks, one disk), against the time
    that takes at the disk's sequential bandwidth."""
    read, read0 = t.get("eval_read_bytes", -1), base.get("eval_read_bytes", -1)
    if read is None or read < 0:
        return "  Evaluation reads: not recorded (a run from before eval_read_bytes)."
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


def _uncapped(r: dict) -> bool:
    return r["cap"] is None and not r.get("cap_spec")


def render(res: dict) -> str:
    runs, gr = res["runs"], res["graph"]
    seq = res["disk"].get("sequential_bytes_per_s")
    every = {
        r["train"]["config"].get("average_every")
        for r in runs
        if r["engine"] == "averaging" and "train" in r
    }
    lines = header(
        "Out-of-core distributed training (issue 11)",
        res,
        *([res["note"]] if res.get("note") else []),
        f"Run on {res['date']}. Store: `{gr['synth']}` ({gr['nodes']:,} nodes, "
        f"{gr['edges']:,} stored edges, {gr['feature_bytes'] / 1e9:.2f} GB of features) in 2 "
        "parts (`shoal "
        "partition --parts 2`, the default partitioner), with halo features; one store per "
        "node order (`--node-order`, degree order: each part's rows in descending in-degree; "
        "`id`, the store's default: original ID order; the uncapped runs use the first order "
        "of `--node-orders`). Train: GraphSAGE 10,5 hidden 128, batch 1024, "
        f"{res['epochs']} epoch(s), 2 worker processes of 1 thread each; exact evaluation of "
        "every node after the last epoch (val, then val+test with the best weights). "
        "Capped runs: each worker in its own cgroup-v1 memory group (process + page cache). "
        "`read GB/epoch` (mean over the epochs) and `unique GB/epoch` sum both ranks: bytes "
        "read from disk for the epoch's features (windows, and sweeps packing epochs), and the "
        "rows (distinct per rank and window) its batches needed beyond the cache; `written "
        "GB/epoch`: pack files written (mean); `requested GB` the rows gathered, repeats "
        "included. `median` / `mean`: of the epoch seconds; the mean includes the first epoch, "
        "which carries the run's start (cache load, and the sweep that packs the epochs). "
        "`peak GiB`: each rank's sampled peak of its group's rss + cache. `io wait s/epoch`: "
        "the median epoch's seconds a rank waited for its window's rows; `read at seq. "
        "bandwidth`: the median epoch's bytes read (both ranks, one disk) at the disk's "
        "sequential bandwidth."
        + "".join(f" The averaging engine averaged the models every {k} epoch(s)." for k in every),
        disk_line(res["disk"], shared=", shared by both ranks"),
    )
    lines += [
        "| run | wall s | epoch seconds | median | mean | eval seconds | val acc | test acc | "
        "read GB/epoch | written GB/epoch | unique GB/epoch | requested GB/epoch | "
        "cache hit rate | io wait s/epoch | read at seq. bandwidth s/epoch | peak GiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_row(r, seq) for r in runs]
    lines.append("")
    for r in runs:
        # the uncapped run of the engine (only the first node order runs uncapped)
        base = next((b for b in runs if b["engine"] == r["engine"] and _uncapped(b)), None)
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
                else f"accuracy not compared (the uncapped run is on the {base.get('order')}-"
                "ordered store: other numbering, other samples)."
            )
        )
        lines.append(_reads_line(t, e0))
        lines.append(_eval_line(t, base["train"], r, seq))
    return "\n".join(lines + _order_lines(runs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench_args(ap, out="bench/results/out_of_core_engines")
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
    ap.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    a = ap.parse_args()
    prefix = out_prefix(a, "bench/results/out_of_core_engines")
    if a.report_only:
        write_results(prefix, load_json(prefix.with_suffix(".json")), render)
        return
    name, epochs = ("smoke", 1) if a.smoke else ("10m", a.epochs)
    capped = caps_available(a.smoke)
    res = new_results("out_of_core_engines.py", threads=1, epochs=epochs)
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    g = synth_graph(name)
    meta = json.loads((g / "meta.json").read_text())
    res["graph"] = {
        "synth": "shoal data synth dcsbm " + " ".join(synth_flags(GRAPHS[name])),
        "nodes": meta["num_nodes"],
        "edges": meta["num_edges"],
        "feature_bytes": (g / "features.npy").stat().st_size,
    }
    res["disk"] = disk_limits()
    runs: list[dict] = []
    for job in plan_runs(a):
        store = build_store(g, job["order"])
        cap, spec = None, job.pop("cap")
        if spec and capped:  # the engine's uncapped run, else the first one (fullgraph)
            ok = [r for r in runs if _uncapped(r) and "train" in r]
            base = next((r for r in ok if r["engine"] == job["engine"]), ok[0] if ok else None)
            cap = rank_cap(spec, base)
        runs.append(train(store, epochs=epochs, cap=cap, cap_spec=spec, **job))
    res["runs"] = runs
    write_results(prefix, res, render)
    print(prefix.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
