"""``disagg`` engine benchmark (issues 14, 37): scaling of batch workers, bytes, speed,
accuracy, high-degree replication, parallel replicas, swapped-out parts.

Parts (processes of 1 thread each under torch.distributed.run; stores: SPRING, 6 parts, so 1,
2 or 3 batch workers hold equal shares):

``scaling``: the 200k-node synthetic graph of ``bench/distributed.py speed`` and a 1M-node one,
3-layer GraphSAGE (fanouts 15,10,5, hidden 64, batch 1024: sampling and feature loading
dominate, as in the paper's Figure 1), one compute worker and 1, 2, 3 batch workers:
iterations per second (the paper's Figure 8).

``bytes``: the 200k-node graph, one compute worker with ``G = 2`` replicas and one batch
worker: bytes per epoch with and without grouping, with compute-worker caches of 0, 5% and 20%
of the nodes (hit rate, bytes saved).

``speed``: epoch time of ``disagg`` against ``minibatch`` at the same process count (2 and 3),
back to back, on the 200k-node graph.

``accuracy``: Cora, Amazon-Photo and Coauthor-Physics (the hyper-parameters of
``bench/hec.py``: batches of 16 seeds), 2 parts, 3 processes (2 batch workers, 1 compute
worker), 10 seeds, against the single-process trainer; ``--local-sampling`` next to it.

Issue 37's parts use the 200k-node graph's 2-part store (that of ``bench/distributed.py``).

``replication`` (issue 37): 2 batch workers (one part each) and 1 compute worker,
``--replicate-top`` 0 (off, the ablation), 0.1%, 1%, 5%: bytes of sampling requests and of
row pulls between batch workers, epoch time, the last epoch's training loss and accuracy;
then Cora's test accuracy (2 batch workers, 1 compute worker, 3 seeds) without and with 1%.

``replicas`` (issue 37): 1 batch worker and 1 compute worker with ``G`` = 2 and 4 replicas
(hidden 256, so the replicas' compute matters), ``--replica-exec`` sequential and threads.

``swapped`` (issue 37): 1 batch worker holding one of its 2 parts at a time
(``--resident-parts 1``):
swapped-out parts sampled from the store (``read``) against no neighbours (``skip``, the
paper's footnote 1).

Usage::

    python bench/disagg.py scaling | bytes | speed | accuracy | replication | replicas |
        swapped | report

Results: bench/results/disagg.json and bench/results/disagg.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import distributed as dbench  # bench/distributed.py: data preparation, helpers
from common import (
    PY,
    RESULTS,
    WORK,
    load_json,
    record_command,
    sh,
    shoal,
    write_json,
    write_text_atomic,
)

#: name -> (nodes, edges, training fraction): 20,000 training nodes each (20 iterations)
GRAPHS = {"synth-200k": (200_000, 1_000_000, 0.1), "synth-1m": (1_000_000, 5_000_000, 0.02)}
PARTS = 6
SPEED_CFG = dict(
    model="sage",
    fanouts=(15, 10, 5),
    batch_size=1024,
    hidden=64,
    lr=0.003,
    seed=0,
    progress=False,
    threads=1,
)


def load() -> dict:
    return load_json(RESULTS / "disagg.json")


def save(res: dict) -> None:
    write_json(RESULTS / "disagg.json", res)
    write_markdown(res)


def synth(name: str, parts: int = PARTS) -> Path:
    """The synthetic graph ``name`` and its ``parts``-part store (built once)."""
    nodes, edges, frac = GRAPHS[name]
    g = WORK / name
    if not (g / "meta.json").exists():
        shoal(
            "data",
            "synth",
            "dcsbm",
            "--nodes",
            str(nodes),
            "--edges",
            str(edges),
            "--out",
            str(g),
            "--classes",
            "47",
            "--features",
            "128",
            "--seed",
            "0",
            "--train-frac",
            str(frac),
        )
    a, s = dbench.DWORK / f"{name}-spring{parts}", dbench.DWORK / f"{name}-store{parts}"
    if not (a / "meta.json").exists():
        shoal("partition", str(g), "--algo", "spring", "--parts", str(parts), "--out", str(a))
    if not (s / "meta.json").exists():
        shoal("store", "build", str(g), str(a), "--out", str(s))
    return s


CPU_CGROUP = Path("/sys/fs/cgroup/cpu")  # cgroup v1 cpu controller (this machine has it)


def cap_cpu(fraction: float, rank: int) -> None:
    """Move this process into its own cgroup-v1 cpu group with a CFS quota of ``fraction`` of
    a core: emulates ranks on separate machines with that much CPU each, so that adding a
    batch worker adds CPU instead of sharing this machine's two cores."""
    g = CPU_CGROUP / f"shoal-bench-disagg-{rank}"
    g.mkdir(exist_ok=True)
    period = int((g / "cpu.cfs_period_us").read_text())
    (g / "cpu.cfs_quota_us").write_text(str(int(fraction * period)))
    (g / "cgroup.procs").write_text(str(os.getpid()))


def remove_cpu_groups() -> None:
    for g in CPU_CGROUP.glob("shoal-bench-disagg-*"):
        try:
            g.rmdir()
        except OSError as e:  # still has a process: leave it, say so
            print(f"could not remove {g}: {e}", file=sys.stderr)


def worker(args: argparse.Namespace) -> None:
    """One rank (started by torch.distributed.run): build the engine, time the epochs."""
    rank = int(os.environ["RANK"])
    compute = rank < int(os.environ["WORLD_SIZE"]) - json.loads(args.extra).get("batch_workers", 0)
    cpu = args.compute_cpu if compute and args.compute_cpu else args.cpu
    if cpu:
        cap_cpu(cpu, rank)
    from shoal.distributed import DistConfig, process_group
    from shoal.engines import get_engine
    from shoal.engines.config import read_config
    from shoal.store import Store
    from shoal.utils.threads import set_threads

    set_threads(1)
    # engine options (batch_workers, replicas, ...) by their flag names, as `shoal train`
    opts = {**SPEED_CFG, "epochs": args.epochs, **json.loads(args.extra)}
    tc = read_config({**opts, "engine": args.engine}, origin="bench/disagg.py")
    with process_group(DistConfig(threads=1)) as ctx:
        eng = get_engine(args.engine)(Store.open(args.store), tc, ctx)
        recs = [eng.train_epoch(e) for e in range(args.epochs + 1)][1:]  # one warm-up epoch
        split = {
            k: statistics.median(r["time_split"][k] for r in recs) for k in recs[0]["time_split"]
        }
        Path(f"{args.out}.rank{ctx.rank}").write_text(json.dumps(split))
        if ctx.is_rank0:
            secs = [r["seconds"] for r in recs]
            med = sorted(range(len(secs)), key=secs.__getitem__)[len(secs) // 2]
            Path(args.out).write_text(
                json.dumps(
                    {
                        "engine": args.engine,
                        "epoch_seconds": secs,
                        "median_epoch_seconds": statistics.median(secs),
                        "iterations": eng.num_batches,
                        "time_split_rank0": recs[med]["time_split"],
                        "comm": recs[med]["comm"],
                        "disagg": recs[med].get("disagg"),
                        "settings": eng.settings(),
                        "last_loss": recs[-1].get("loss"),
                        "last_train_accuracy": recs[-1].get("train_accuracy"),
                    }
                )
            )


def run(
    store: Path,
    engine: str,
    nproc: int,
    extra: dict,
    epochs: int,
    cpu: float = 0.0,
    compute_cpu: float = 0.0,
) -> dict:
    out = dbench.DWORK / "disagg-run.json"
    for f in [out, *dbench.DWORK.glob("disagg-run.json.rank*")]:
        f.unlink(missing_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    load_before = os.getloadavg()[0]
    try:
        sh(
            [
                PY,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={nproc}",
                str(Path(__file__).resolve()),
                "worker",
                "--store",
                str(store),
                "--engine",
                engine,
                "--epochs",
                str(epochs),
                "--extra",
                json.dumps(extra),
                "--out",
                str(out),
                "--cpu",
                str(cpu),
                "--compute-cpu",
                str(compute_cpu),
            ],
            env=env,
        )
    finally:
        if cpu:
            remove_cpu_groups()
    r = json.loads(out.read_text())
    r["time_split_ranks"] = [json.loads(Path(f"{out}.rank{i}").read_text()) for i in range(nproc)]
    r["load_before"] = load_before
    r["cpu_per_process"] = cpu or None
    r["cpu_compute_worker"] = compute_cpu or cpu or None
    if r.get("iterations"):
        r["iterations_per_second"] = r["iterations"] / r["median_epoch_seconds"]
    return r


def run_scaling(args: argparse.Namespace) -> None:
    res = load()
    part = " ".join(["scaling", *sys.argv[2:]])  # one entry per set of options
    record_command(res, part, "disagg.py")
    sc = res.setdefault("scaling", {})
    for name in args.graphs.split(","):
        store = synth(name)
        for b in map(int, args.batch_workers.split(",")):
            r = run(
                store,
                "disagg",
                b + 1,
                {"batch_workers": b, "hidden": args.hidden},
                args.epochs,
                args.cpu,
                args.compute_cpu,
            )
            nodes, _, frac = GRAPHS[name]
            r.update(
                graph=name,
                hidden=args.hidden,
                batch_workers=b,
                seeds_per_second=round(nodes * frac) / r["median_epoch_seconds"],
            )
            cpu = f"/cpu{args.cpu:g}" if args.cpu else ""
            cpu += f"-{args.compute_cpu:g}" if args.compute_cpu else ""
            sc[f"{name}/h{args.hidden}{cpu}/B{b}"] = r
            print(name, args.hidden, cpu, b, round(r["iterations_per_second"], 2), flush=True)
            save(res)


def run_bytes(args: argparse.Namespace) -> None:
    res = load()
    record_command(res, "bytes", "disagg.py")
    store = synth("synth-200k")
    by = res["bytes"] = {}
    for grouping in (True, False):
        for cache in ("0", "5%", "20%"):
            extra = {"batch_workers": 1, "replicas": 2, "grouping": grouping, "disagg_cache": cache}
            r = run(store, "disagg", 2, extra, args.epochs)
            by[f"{'grouped' if grouping else 'ungrouped'}/{cache}"] = r
            print(grouping, cache, r["disagg"]["batch_bytes"], flush=True)
            save(res)


def run_speed(args: argparse.Namespace) -> None:
    res = load()
    record_command(res, "speed", "disagg.py")
    store = synth("synth-200k")
    sp = res["speed"] = {}
    for nproc in (2, 3):
        for eng, extra in (("minibatch", {}), ("disagg", {"batch_workers": nproc - 1})):
            sp[f"{eng}/{nproc}"] = run(store, eng, nproc, extra, args.epochs)
            print(eng, nproc, sp[f"{eng}/{nproc}"]["median_epoch_seconds"], flush=True)
            save(res)


ACC = ("cora", "amazon_photo", "coauthor_physics")
TOPS = ("0", "0.1%", "1%", "5%")


def run_replication(args: argparse.Namespace) -> None:
    """Armada Sec. 5's replicated high-degree nodes: bytes, time, loss; Cora's accuracy."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import hec as hbench

    res = load()
    record_command(res, "replication", "disagg.py")
    store = synth("synth-200k", 2)
    rp = res["replication"] = {"speed": {}, "accuracy": {}}
    for top in args.tops.split(","):
        extra = {"batch_workers": 2, "replicate_top": top}
        r = run(store, "disagg", 3, extra, args.epochs)
        rp["speed"][top] = r
        print("replicate", top, r["median_epoch_seconds"], r["disagg"]["sample_bytes"], flush=True)
        save(res)
    for name in args.datasets.split(","):
        hp = hbench.hparams(name)
        _, s = dbench.prepare(name, 2)
        runs = rp["accuracy"].setdefault(name, {})
        for seed in range(args.seeds):
            for top in ("0", "1%"):
                flags = ["--batch-workers", "2", "--replicate-top", top]
                runs[f"{top}/seed{seed}"] = _engine(s, hp, seed, flags)
                print(name, top, seed, runs[f"{top}/seed{seed}"]["test_accuracy"], flush=True)
                save(res)


def run_replicas(args: argparse.Namespace) -> None:
    """A compute worker's G replicas in threads against one after the other."""
    res = load()
    record_command(res, "replicas", "disagg.py")
    store = synth("synth-200k", 2)
    rs = res["replicas"] = {}
    for g in map(int, args.groups.split(",")):
        for mode in ("sequential", "threads"):
            extra = {"batch_workers": 1, "replicas": g, "replica_exec": mode, "hidden": 256}
            r = run(store, "disagg", 2, extra, args.epochs)
            rs[f"G{g}/{mode}"] = r
            print("replicas", g, mode, r["median_epoch_seconds"], r["last_loss"], flush=True)
            save(res)


def run_swapped(args: argparse.Namespace) -> None:
    """Swapped-out parts sampled from the store against the paper's footnote 1 (none)."""
    res = load()
    record_command(res, "swapped", "disagg.py")
    store = synth("synth-200k", 2)
    sw = res["swapped"] = {}
    for mode in ("read", "skip"):
        extra = {"batch_workers": 1, "resident_parts": 1, "swapped_neighbours": mode}
        r = run(store, "disagg", 2, extra, args.epochs)
        sw[mode] = r
        print("swapped", mode, r["median_epoch_seconds"], r["disagg"]["disk_sampled"], flush=True)
        save(res)


def run_accuracy(args: argparse.Namespace) -> None:
    """Resumable: runs already in the JSON are kept."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import hec as hbench

    res = load()
    record_command(res, "accuracy", "disagg.py")
    acc = res.setdefault("accuracy", {})
    for name in args.datasets.split(","):
        hp = hbench.hparams(name)
        entry = acc.setdefault(name, {"hparams": hp, "runs": {}})
        g, store = dbench.prepare(name, 2)
        hec_single = _hec_single(hbench.load(), name, hp)
        for seed in range(args.seeds):
            for kind in ("single", "disagg", "local"):
                key = f"{kind}/seed{seed}"
                if key in entry["runs"] or (kind == "local" and seed >= args.local_seeds):
                    continue
                if kind == "single":
                    r = hec_single.get(key) or dbench.single(g, hp, seed)
                else:
                    flags = ["--batch-workers", "2"] + (
                        ["--local-sampling"] if kind == "local" else []
                    )
                    r = _engine(store, hp, seed, flags)
                entry["runs"][key] = r
                print(name, key, r["test_accuracy"], flush=True)
                save(res)


def _hec_single(hec_res: dict, name: str, hp: dict) -> dict:
    """The single-process runs of ``bench/hec.py accuracy`` with the same hyper-parameters
    (same trainer, same seeds: the same numbers), so the reference is not trained twice."""
    entry = hec_res.get("accuracy", {}).get(name, {})
    if entry.get("hparams") != hp:
        return {}
    return {
        k: {"test_accuracy": r["test_accuracy"], "from": "bench/hec.py accuracy"}
        for k, r in entry["runs"].items()
        if k.startswith("single/")
    }


def _engine(store: Path, hp: dict, seed: int, flags: list[str]) -> dict:
    out = dbench.DWORK / f"disagg-acc-{store.name}-{seed}.json"
    t = time.perf_counter()
    sh(
        [
            PY,
            "-m",
            "shoal",
            "train",
            "--store",
            str(store),
            "--engine",
            "disagg",
            "--nproc",
            "3",
            *flags,
            "--json",
            str(out),
            *dbench.hp_flags(hp, seed),
        ]
    )
    d = json.loads(out.read_text())
    return {
        "test_accuracy": d["test_accuracy"],
        "seconds": time.perf_counter() - t,
        "bytes_per_epoch": d["bytes_per_epoch"],
    }


def _mean(xs: list[float]) -> str:
    if not xs:
        return "-"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.3f} ± {sd:.3f} ({len(xs)})"


def _accs(entry: dict, kind: str) -> list[float]:
    return [r["test_accuracy"] for k, r in entry["runs"].items() if k.startswith(kind + "/")]


def _scaling_notes(sc: dict) -> list[str]:
    out = []
    groups: dict[str, list[tuple[int, dict]]] = {}
    for key, r in sc.items():
        head, b = key.rsplit("/", 1)
        groups.setdefault(head, []).append((int(b[1:]), r))
    for head, rows in groups.items():
        name, cfg = head.split("/", 1)
        nodes, _, frac = GRAPHS[name]
        sps = {b: round(nodes * frac) / r["median_epoch_seconds"] for b, r in sorted(rows)}
        best = max(sps, key=sps.__getitem__)
        quota = "with a CPU quota per rank" if "/cpu" in cfg else "sharing 2 cores"
        out.append(
            f"- Scaling, {name}, {cfg.replace('/', ' ')} ({quota}): seeds/s "
            + ", ".join(f"{v:.0f}" for v in sps.values())
            + f" for {min(sps)}-{max(sps)} batch workers; the most at {best} "
            f"({sps[best] / sps[min(sps)]:.2f}x the first)."
        )
    return out


def notes(res: dict) -> list[str]:
    """Observations computed from the results (no hand-written figures)."""
    out = ["## Notes (computed from the tables)", ""]
    out += _scaling_notes(res.get("scaling", {}))
    by = res.get("bytes", {})
    if "grouped/0" in by and "ungrouped/0" in by:
        mb = {k: r["disagg"]["batch_bytes"] for k, r in by.items()}
        out.append(
            f"- Bytes: grouping sends {mb['grouped/0'] / mb['ungrouped/0']:.2f}x the "
            "ungrouped batch bytes without cache; a cache of 5% of the nodes sends "
            f"{mb.get('grouped/5%', float('nan')) / mb['grouped/0']:.2f}x (grouped), 20% "
            f"{mb.get('grouped/20%', float('nan')) / mb['grouped/0']:.2f}x."
        )
    sp = res.get("speed", {})
    for n in (2, 3):
        if f"disagg/{n}" in sp and f"minibatch/{n}" in sp:
            ratio = (
                sp[f"disagg/{n}"]["median_epoch_seconds"]
                / sp[f"minibatch/{n}"]["median_epoch_seconds"]
            )
            out.append(
                f"- Epoch time, {n} processes on 2 shared cores: disagg / minibatch = {ratio:.2f}."
            )
    out += _issue37_notes(res)
    for name, e in res.get("accuracy", {}).items():
        s0 = _accs(e, "single")
        for kind in ("disagg", "local"):
            xs = _accs(e, kind)
            if s0 and xs:
                d = 100 * (statistics.mean(xs) - statistics.mean(s0))
                verdict = "within" if abs(d) <= 1.0 else "outside"
                out.append(
                    f"- Accuracy, {name}, {kind} ({len(xs)} seeds) against single "
                    f"({len(s0)}): {d:+.1f} points, {verdict} 1 point."
                )
    return out


def _issue37_notes(res: dict) -> list[str]:
    out = []
    sp = res.get("replication", {}).get("speed", {})
    if "0" in sp:
        base = sp["0"]
        b0 = base["disagg"]["sample_bytes"] + base["disagg"]["pull_bytes"]
        for top, r in sp.items():
            if top == "0":
                continue
            b = r["disagg"]["sample_bytes"] + r["disagg"]["pull_bytes"]
            out.append(
                f"- Replication {top}: sampling + pull bytes between batch workers "
                f"{b / b0:.2f}x of no replication, epoch time "
                f"{r['median_epoch_seconds'] / base['median_epoch_seconds']:.2f}x."
            )
    for name, runs in res.get("replication", {}).get("accuracy", {}).items():
        xs = {
            t: [r["test_accuracy"] for k, r in runs.items() if k.startswith(t + "/")]
            for t in ("0", "1%")
        }
        if xs["0"] and xs["1%"]:
            d = 100 * (statistics.mean(xs["1%"]) - statistics.mean(xs["0"]))
            out.append(
                f"- Replication accuracy, {name}: 1% against none {d:+.1f} points "
                f"({len(xs['1%'])} seeds)."
            )
    rs = res.get("replicas", {})
    for g in (2, 4):
        a, b = rs.get(f"G{g}/sequential"), rs.get(f"G{g}/threads")
        if a and b:
            out.append(
                f"- Replicas G = {g}: threads / sequential epoch time = "
                f"{b['median_epoch_seconds'] / a['median_epoch_seconds']:.2f}; last loss "
                f"{a['last_loss']:.5f} vs {b['last_loss']:.5f}."
            )
    return out


def _send_wait(r: dict) -> str:
    """The batch workers' mean time blocked on a full queue (compute-bound when large)."""
    ws = [t["send_wait"] for t in r.get("time_split_ranks", []) if "send_wait" in t]
    return f"{statistics.mean(ws):.2f}" if ws else "-"


def write_markdown(res: dict) -> None:
    lines = [
        "# disagg engine (Armada): batch workers feeding compute workers",
        "",
        f"Machine: {res.get('machine', '?')}. Written by `bench/disagg.py` (commands "
        "below). Every process runs one thread.",
        "",
    ]
    if "scaling" in res:
        lines += [
            "## Throughput against batch workers (1 compute worker)",
            "",
            "3-layer GraphSAGE 15,10,5, batch 1024, 6-part store.",
            "",
            "'CPU per process': a cgroup CFS quota per rank (`--cpu`), emulating one "
            "machine per rank; '-': the ranks share this machine's 2 cores.",
            "",
            "Seeds/s: training nodes per second (20,000 per epoch on both graphs); "
            "iterations grow with the batch workers, since each worker's parts end in "
            "a partial batch.",
            "",
            "| graph | hidden | CPU per process | batch workers | processes | seeds/s "
            "| iterations | iterations/s "
            "| epoch s | compute worker waiting for batches s | assembling s | computing s "
            "| batch workers waiting to send s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for key, r in res["scaling"].items():
            name, h, b = key.split("/")[0], key.split("/")[1][1:], key.split("/")[-1][1:]
            cpu = (
                f"{r['cpu_per_process']:g} (compute {r.get('cpu_compute_worker') or r['cpu_per_process']:g})"
                if r.get("cpu_per_process")
                else "-"
            )
            ts = r["time_split_rank0"]
            nodes, _, frac = GRAPHS[name]
            lines.append(
                f"| {name} | {h} | {cpu} | {b} | {int(b) + 1} | "
                f"{round(nodes * frac) / r['median_epoch_seconds']:.0f} | "
                f"{r['iterations']} | {r['iterations_per_second']:.2f} | {r['median_epoch_seconds']:.2f} | "
                f"{ts.get('receive_wait', 0):.2f} | "
                + (f"{ts['assemble']:.2f} | " if "assemble" in ts else "- | ")
                + f"{ts.get('forward_backward', 0) + ts.get('allreduce', 0):.2f} | "
                f"{_send_wait(r)} |"
            )
        lines.append("")
    if "bytes" in res:
        lines += [
            "## Bytes per epoch: grouping and the compute-worker cache (200k nodes)",
            "",
            "1 batch worker, 1 compute worker with G = 2 replicas.",
            "",
            "| batches | cache | batch MB/epoch | rows sent | hit rate | update MB | epoch s |",
            "|---|---|---|---|---|---|---|",
        ]
        for key, r in res["bytes"].items():
            grouping, cache = key.split("/")
            d = r["disagg"]
            lines.append(
                f"| {grouping} | {cache} | {d['batch_bytes'] / 1e6:.1f} | "
                f"{int(d['rows_sent'])} | {d['hit_rate']:.2f} | "
                f"{d['update_bytes'] / 1e6:.2f} | {r['median_epoch_seconds']:.2f} |"
            )
        lines.append("")
    if "speed" in res:
        lines += [
            "## Epoch time against minibatch (200k nodes, same processes)",
            "",
            "| engine | processes | median epoch s | MB sent/epoch |",
            "|---|---|---|---|",
        ]
        for key, r in res["speed"].items():
            eng, n = key.split("/")
            lines.append(
                f"| {eng} | {n} | {r['median_epoch_seconds']:.2f} | "
                f"{r['comm']['bytes_sent'] / 1e6:.1f} |"
            )
        lines.append("")
    if "accuracy" in res:
        lines += [
            "## Accuracy (2 parts, 3 processes: 2 batch workers, 1 compute worker)",
            "",
            "| graph | single | disagg | diff | disagg --local-sampling | diff |",
            "|---|---|---|---|---|---|",
        ]
        for name, e in res["accuracy"].items():
            s0, d, lo = (_accs(e, k) for k in ("single", "disagg", "local"))
            m0 = statistics.mean(s0) if s0 else float("nan")
            diff = [f"{(statistics.mean(x) - m0) * 100:+.1f}" if x and s0 else "-" for x in (d, lo)]
            lines.append(
                f"| {name} | {_mean(s0)} | {_mean(d)} | {diff[0]} | {_mean(lo)} | {diff[1]} |"
            )
        lines.append("")
    lines += _issue37_tables(res)
    lines += [*notes(res), "", "## Commands", ""]
    lines += [f"- {k}: `{v}`" for k, v in res.get("commands", {}).items()]
    write_text_atomic(RESULTS / "disagg.md", "\n".join(lines) + "\n")


def _mb(x: float) -> str:
    return f"{x / 1e6:.1f}"


def _issue37_tables(res: dict) -> list[str]:
    lines: list[str] = []
    rp = res.get("replication", {})
    if rp.get("speed"):
        lines += [
            "## High-degree replication (Armada Sec. 5; 200k nodes, 2 parts, 2 batch "
            "workers, 1 compute worker)",
            "",
            "Every batch worker keeps the neighbour lists and rows of the top nodes by "
            "in-degree. Sampling / pull MB: bytes the batch workers sent each other per epoch "
            "(sampling requests and answers; feature-row pulls), summed over them. Requests: "
            "frontier nodes sent to their owner to sample; from replica: sampled locally "
            "instead; saved MB: those requests' bytes (id out, count and picks back). "
            "Loss / train acc.: the last epoch's. The machine's 2 cores were shared with "
            "other jobs: times are noisy.",
            "",
            "| replicate top | nodes | replica MB per worker | sampling MB | pull MB | "
            "requests | from replica | saved MB | rows from replica | epoch s | loss | "
            "train acc. |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for top, r in rp["speed"].items():
            d = r["disagg"]
            nodes = int(GRAPHS["synth-200k"][0] * float(top[:-1]) / 100) if top != "0" else 0
            lines.append(
                f"| {top} | {nodes} | {_mb(d['replica_bytes'] / 2)} | "
                f"{_mb(d['sample_bytes'])} | {_mb(d['pull_bytes'])} | "
                f"{int(d['remote_requests'])} | {int(d['replica_sampled'])} | "
                f"{_mb(d['replica_saved_bytes'])} | {int(d['replica_rows'])} | "
                f"{r['median_epoch_seconds']:.2f} | {r['last_loss']:.4f} | "
                f"{r['last_train_accuracy']:.4f} |"
            )
        lines.append("")
    if rp.get("accuracy"):
        lines += [
            "Test accuracy (2 parts, 2 batch workers, 1 compute worker, the "
            "hyper-parameters of `bench/hec.py accuracy`):",
            "",
            "| graph | no replication | replicate top 1% | diff |",
            "|---|---|---|---|",
        ]
        for name, runs in rp["accuracy"].items():
            xs = [
                [r["test_accuracy"] for k, r in runs.items() if k.startswith(t + "/")]
                for t in ("0", "1%")
            ]
            diff = (
                f"{100 * (statistics.mean(xs[1]) - statistics.mean(xs[0])):+.1f}"
                if xs[0] and xs[1]
                else "-"
            )
            lines.append(f"| {name} | {_mean(xs[0])} | {_mean(xs[1])} | {diff} |")
        lines.append("")
    if res.get("replicas"):
        lines += [
            "## Parallel replicas (200k nodes, 2 parts, hidden 256, 1 batch worker, "
            "1 compute worker)",
            "",
            "A compute worker's G replicas in G threads (weights shared, gradients summed in "
            "replica order) against one after the other; one intra-op thread per process "
            "(so threads use up to G cores of the 2, with the batch worker).",
            "",
            "| G | replica exec | epoch s | forward/backward s | waiting for batches s | "
            "last loss | train acc. |",
            "|---|---|---|---|---|---|---|",
        ]
        for key, r in res["replicas"].items():
            g, mode = key.split("/")
            ts = r["time_split_rank0"]
            lines.append(
                f"| {g[1:]} | {mode} | {r['median_epoch_seconds']:.2f} | "
                f"{ts.get('forward_backward', 0):.2f} | {ts.get('receive_wait', 0):.2f} | "
                f"{r['last_loss']:.5f} | {r['last_train_accuracy']:.4f} |"
            )
        lines.append("")
    if res.get("swapped"):
        lines += [
            "## Swapped-out parts (200k nodes, 2 parts, 1 batch worker, `--resident-parts 1`)",
            "",
            "read: a node of a part swapped out at its batch worker is sampled from the "
            "store's files (the draws of a resident part); skip: it gets no neighbours (the "
            "paper's footnote 1).",
            "",
            "| swapped neighbours | sampled from the store | MB read for them | "
            "without neighbours | epoch s | loss | train acc. |",
            "|---|---|---|---|---|---|---|",
        ]
        for mode, r in res["swapped"].items():
            d = r["disagg"]
            lines.append(
                f"| {mode} | {int(d['disk_sampled'])} | {_mb(d['disk_bytes'])} | "
                f"{int(d['unavailable'])} | {r['median_epoch_seconds']:.2f} | "
                f"{r['last_loss']:.4f} | {r['last_train_accuracy']:.4f} |"
            )
        lines.append("")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("scaling")
    s.add_argument("--graphs", default=",".join(GRAPHS))
    s.add_argument(
        "--hidden",
        type=int,
        default=64,
        help="a small width makes batch preparation the bottleneck",
    )
    s.add_argument("--batch-workers", default="1,2,3")
    s.add_argument(
        "--cpu",
        type=float,
        default=0.0,
        help="CPU quota per process in cores (cgroup v1 cpu controller; 0: none). "
        "0.5 with 1 compute and up to 3 batch workers fills 2 cores exactly",
    )
    s.add_argument(
        "--compute-cpu",
        type=float,
        default=0.0,
        help="the compute worker's quota instead of --cpu (a compute worker faster "
        "than one batch worker, as a GPU is in the paper)",
    )
    for name in ("scaling", "bytes", "speed", "replication", "replicas", "swapped"):
        p = s if name == "scaling" else sub.add_parser(name)
        p.add_argument("--epochs", type=int, default=2)
        if name == "replicas":
            p.add_argument("--groups", default="2,4", help="replica counts G")
        if name == "replication":
            p.add_argument("--tops", default=",".join(TOPS))
            p.add_argument("--datasets", default="cora")
            p.add_argument("--seeds", type=int, default=3)
    a = sub.add_parser("accuracy")
    a.add_argument("--datasets", default=",".join(ACC))
    a.add_argument("--seeds", type=int, default=10)
    a.add_argument("--local-seeds", type=int, default=3)
    w = sub.add_parser("worker")
    for flag in ("--store", "--engine", "--extra", "--out"):
        w.add_argument(flag, required=True)
    w.add_argument("--epochs", type=int, default=2)
    w.add_argument("--cpu", type=float, default=0.0)
    w.add_argument("--compute-cpu", type=float, default=0.0)
    sub.add_parser("report")
    args = ap.parse_args()
    dbench.DWORK.mkdir(parents=True, exist_ok=True)
    {
        "scaling": run_scaling,
        "bytes": run_bytes,
        "speed": run_speed,
        "accuracy": run_accuracy,
        "replication": run_replication,
        "replicas": run_replicas,
        "swapped": run_swapped,
        "worker": worker,
        "report": lambda _: write_markdown(load()),
    }[args.cmd](args)


if __name__ == "__main__":
    main()
