"""``disagg`` engine benchmark (issues 14, 37): batch workers feeding compute workers (Armada):
scaling, bytes, speed, accuracy, high-degree replication, parallel replicas, swapped-out parts.

Every run is ``shoal train --store S --engine disagg --threads 1`` naming every disagg option
(:data:`OPTIONS`, a part varies some). Timing parts: 3-layer GraphSAGE 15,10,5, batch 1024
(sampling and feature loading dominate, as in Armada's Figure 1) on ``common.GRAPHS`` ``200k``
(and ``1m``), SPRING stores without halo features; a run trains one epoch more than it times
(the first left out). With ``--cpu`` each rank is its own ``torchrun -m shoal train`` node in a
cgroup-v1 cpu group with that CFS quota (emulating one machine per rank; root), else
``common.train`` with ``--nproc``.

``scaling``: one compute worker and 1, 2, 3 batch workers on a 6-part store (equal shares):
seeds and iterations per second (Armada's Figure 8).

``bytes``: one batch worker, one compute worker with G = 2 replicas: batch bytes per epoch with
and without grouping, compute-worker caches of 0, 5% and 20% of the nodes (hit rate).

``speed``: disagg against minibatch at the same process count (2 and 3), one after the other.

``accuracy``: Cora, Amazon-Photo and Coauthor-Physics with ``bench/hec.py``'s hyper-parameters
(batches of 16 seeds), 2 parts, 2 batch workers and 1 compute worker, 10 seeds, against the
single-process trainer (whose runs in hec.json beside these results are reused when their
hyper-parameters match); ``--local-sampling`` beside it (3 seeds). Resumable.

``replication``: 2 batch workers (one part each), 1 compute worker, ``--replicate-top`` 0 (off),
0.1%, 1%, 5%: sampling and pull bytes between batch workers, epoch time, last loss; then Cora's
test accuracy without and with 1% (3 seeds).

``replicas``: 1 batch worker, 1 compute worker with G = 2 and 4 replicas (hidden 256),
``--replica-exec`` sequential and threads.

``swapped``: 1 batch worker holding one of its 2 parts at a time (``--resident-parts 1``):
swapped-out parts sampled from the store (``read``) against none (``skip``, the paper's
footnote 1).

Usage::

    python bench/disagg.py scaling [--graphs 200k,1m] [--cpu 0.2 --compute-cpu 1.0] ...
    python bench/disagg.py bytes | speed | accuracy | replication | replicas | swapped
    python bench/disagg.py report      # render the markdown from the JSON again
    python bench/disagg.py --smoke     # every part on Cora: one 2-process run in all

Results: bench/results/disagg.json and .md; each section names its rows' commands, commit and
machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path

from common import (
    PY,
    WORK,
    bench_args,
    dataset_graph,
    dataset_store,
    epoch_summary,
    hp_flags,
    load_json,
    out_prefix,
    partitioned_store,
    parts_header,
    provenance,
    run_parts,
    shared_run,
    single,
    stamp,
    synth_graph,
    train,
    write_results,
)
from hec import hparams

SCRIPT = "disagg.py"
SPEED_HP = dict(
    model="sage",
    fanouts="15,10,5",
    hidden=64,
    lr=0.003,
    weight_decay=0.0,
    dropout=0.5,
    batch_size=1024,
    normalize_features=False,
)
#: every disagg option a run names (a part varies some): flag -> value
OPTIONS = {
    "batch-workers": 1,
    "replicas": 1,
    "disagg-cache": "5%",
    "replicate-top": "0",
    "swapped-neighbours": "read",
    "replica-exec": "sequential",
}
CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
#: --smoke: every part on Cora (2 parts, bench/hec.py's hyper-parameters, 2 epochs), 1 batch
#: worker, the options' values above, so that all of them ask for the same 2-process run (made
#: once: common.shared_run), besides one single-process run
SMOKE = {
    "scaling": dict(graphs="cora", batch_workers="1"),
    "bytes": dict(replicas=1, groupings="grouped", caches="5%"),
    "speed": dict(nproc="2", engines="disagg"),
    "accuracy": dict(datasets="cora", seeds=1, local_seeds=0, batch_workers=1),
    "replication": dict(tops="0", batch_workers=1, seeds=1, accuracy_tops="0"),
    "replicas": dict(groups="1", exec="sequential", hidden=64),
    "swapped": dict(modes="read", resident_parts=0),
}


def disagg_flags(**opts) -> list[str]:
    """Every option of :data:`OPTIONS` (``opts`` by their Python names replacing some), and
    ``grouping=False``, ``local_sampling=True``, ``resident_parts=K`` where given."""
    o = {**OPTIONS, **{k.replace("_", "-"): v for k, v in opts.items()}}
    flags = [f"--{k}={o[k]}" for k in OPTIONS]
    flags += [] if o.get("grouping", True) else ["--no-grouping"]
    flags += ["--local-sampling"] if o.get("local-sampling") else []
    flags += [f"--resident-parts={o['resident-parts']}"] if o.get("resident-parts") else []
    return flags


# ----------------------------------------------------------------------------- runs
def launch(
    store: Path, engine: str, nproc: int, hp: dict, seed: int, flags: list, quota: tuple = ()
) -> dict:
    """``shoal train`` of ``engine`` on ``nproc`` processes of one thread: the run's JSON
    (``quota``: :func:`capped`'s)."""
    args = ["--store", store, "--engine", engine, "--threads", 1, *hp_flags(hp, seed), *flags]
    args = [str(a) for a in args]
    out = WORK / "disagg" / "run.json"

    def make() -> dict:
        if not quota:
            return train(*args, "--nproc", nproc, out=out)
        out.unlink(missing_ok=True)
        capped([*args, "--json", str(out)], nproc, *quota)
        return json.loads(out.read_text())

    return shared_run((str(nproc), *args, str(quota)), make)


def capped(args: list[str], nproc: int, cpu: float, compute_cpu: float, computing: int) -> None:
    """Each rank a torchrun node of its own (``--nnodes N --node-rank i``, as on a cluster)
    running ``-m shoal train ARGS`` in a cgroup-v1 cpu group with a CFS quota of ``cpu`` cores
    (``compute_cpu`` for the ``computing`` first ranks, the compute workers): one machine of
    that many cores per rank, so that a batch worker more adds CPU instead of sharing these."""
    port, procs, groups = 29500 + os.getpid() % 500, [], []
    try:
        for i in range(nproc):
            g = CPU_CGROUP / f"shoal-bench-disagg-{os.getpid()}-{i}"
            g.mkdir()
            groups.append(g)
            quota = compute_cpu if compute_cpu and i < computing else cpu
            period = int((g / "cpu.cfs_period_us").read_text())
            (g / "cpu.cfs_quota_us").write_text(str(int(quota * period)))
            node = [f"--nnodes={nproc}", f"--node-rank={i}", "--nproc-per-node=1"]
            node += ["--master-addr=127.0.0.1", f"--master-port={port}"]
            procs.append(
                subprocess.Popen(
                    [PY, "-m", "torch.distributed.run", *node, "-m", "shoal", "train", *args],
                    preexec_fn=lambda g=g: (g / "cgroup.procs").write_text(str(os.getpid())),
                    env={**os.environ, "OMP_NUM_THREADS": "1"},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        logs = [p.communicate()[0] for p in procs]
        bad = [i for i, p in enumerate(procs) if p.returncode]
        if bad:
            raise RuntimeError(f"ranks {bad} failed:\n" + "\n".join(logs[i][-3000:] for i in bad))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for g in groups:
            g.rmdir()


def row(run: dict, hp: dict, parts: int, load_before: float) -> dict:
    """A timed run's figures: its timed epochs, their median, the median epoch's split (rank
    0), communication and disagg counters (summed over ranks), the engine's settings, the last
    epoch's loss and training accuracy."""
    hist = run["history"]
    timed = hist[1:] or hist
    mid = sorted(timed, key=lambda h: h["seconds"])[len(timed) // 2]
    med = epoch_summary(run)["median_epoch_seconds"]
    return {
        "engine": run["engine"],
        "hparams": hp,
        "parts": parts,
        "load_before": load_before,
        "epoch_seconds": [h["seconds"] for h in timed],
        "median_epoch_seconds": med,
        "iterations": run["batches_per_epoch"],
        "iterations_per_second": run["batches_per_epoch"] / med,
        "time_split_rank0": mid["time_split"],
        "comm": mid["comm"],
        "disagg": mid.get("disagg"),
        "settings": {k: v for k, v in run["config"].items() if not isinstance(v, dict)},
        "last_loss": hist[-1]["loss"],
        "last_train_accuracy": hist[-1]["train_accuracy"],
    }


def setup(args: argparse.Namespace, graph: str, parts: int, **hp) -> tuple[Path, dict, int]:
    """(store, hyper-parameters, training nodes) of a timing part: ``graph`` (a GRAPHS name)
    in ``parts`` SPRING parts and :data:`SPEED_HP` (``hp`` replacing some), ``--epochs`` + 1
    epochs; under --smoke Cora's 2-part store and bench/hec.py's hyper-parameters."""
    if args.smoke:
        g, store = dataset_store("cora", 2)
        hp = dict(hparams("cora", True), **hp)
    else:
        g = synth_graph(graph)
        store = partitioned_store(g, parts, algo="spring", halo_features=False)
        hp = dict(SPEED_HP, epochs=args.epochs + 1, **hp)
    return store, hp, json.loads((g / "meta.json").read_text())["splits"]["train"]


def timed(store: Path, hp: dict, nproc: int, flags: list, parts: int, engine="disagg", quota=()):
    """A timing run's :func:`row`."""
    load_before = os.getloadavg()[0]
    return row(launch(store, engine, nproc, hp, 0, flags, quota), hp, parts, load_before)


# ----------------------------------------------------------------------------- parts
def run_scaling(args: argparse.Namespace, res: dict, save) -> None:
    cpu = (
        f"/cpu{args.cpu:g}" + (f"-{args.compute_cpu:g}" if args.compute_cpu else "")
        if args.cpu
        else ""
    )
    sc = res.setdefault("scaling", {})
    for name in args.graphs.split(","):
        store, hp, train_nodes = setup(args, name, 6, hidden=args.hidden)
        stamp(res, f"scaling {name} h{args.hidden}{cpu}", SCRIPT, fresh=True)
        for b in ints(args.batch_workers):
            quota = (args.cpu, args.compute_cpu, 1) if args.cpu else ()
            r = timed(store, hp, b + 1, disagg_flags(batch_workers=b), 6, quota=quota)
            r.update(
                graph=name,
                batch_workers=b,
                training_nodes=train_nodes,
                cpu_per_process=args.cpu or None,
                cpu_compute_worker=args.compute_cpu or args.cpu or None,
            )
            sc[f"{name}/h{args.hidden}{cpu}/B{b}"] = r
            print(name, args.hidden, cpu, b, round(r["iterations_per_second"], 2), flush=True)
            save()


def run_bytes(args: argparse.Namespace, res: dict, save) -> None:
    stamp(res, "bytes", SCRIPT, fresh=True)
    store, hp, _ = setup(args, "200k", 6)
    by = res["bytes"] = {}
    for grouping in args.groupings.split(","):
        for cache in args.caches.split(","):
            flags = disagg_flags(
                replicas=args.replicas, grouping=grouping == "grouped", disagg_cache=cache
            )
            r = by[f"{grouping}/{cache}"] = timed(store, hp, 2, flags, 6)
            print(grouping, cache, r["disagg"]["batch_bytes"], flush=True)
            save()


def run_speed(args: argparse.Namespace, res: dict, save) -> None:
    stamp(res, "speed", SCRIPT, fresh=True)
    store, hp, _ = setup(args, "200k", 6)
    sp = res["speed"] = {}
    for n in ints(args.nproc):
        for eng in args.engines.split(","):
            flags = disagg_flags(batch_workers=n - 1) if eng == "disagg" else []
            r = sp[f"{eng}/{n}"] = timed(store, hp, n, flags, 6, engine=eng)
            print(eng, n, r["median_epoch_seconds"], flush=True)
            save()


def run_accuracy(args: argparse.Namespace, res: dict, save) -> None:
    """Resumable: runs already in the JSON are kept."""
    acc = res.setdefault("accuracy", {})
    hec_res = load_json(args.prefix.with_name("hec.json"))
    for name in args.datasets.split(","):
        hp = hparams(name, args.smoke)
        entry = acc.setdefault(name, {"runs": {}})
        entry.update(hparams=hp, batch_workers=args.batch_workers)
        g, store = dataset_graph(name), dataset_store(name, 2)[1]
        hec = hec_res.get("accuracy", {}).get(name, {})
        reuse = hec.get("runs", {}) if hec.get("hparams") == hp else {}
        for seed in range(args.seeds):
            for kind in ("single", "disagg", "local"):
                key = f"{kind}/seed{seed}"
                if key in entry["runs"] or (kind == "local" and seed >= args.local_seeds):
                    continue
                stamp(res, f"accuracy {name}", SCRIPT)
                if kind == "single" and key in reuse:
                    r = {
                        "test_accuracy": reuse[key]["test_accuracy"],
                        "from": "bench/hec.py accuracy",
                    }
                elif kind == "single":
                    r = single(g, hp, seed, out=WORK / "disagg" / "single.json")
                else:
                    flags = disagg_flags(
                        batch_workers=args.batch_workers, local_sampling=kind == "local"
                    )
                    run = launch(store, "disagg", args.batch_workers + 1, hp, seed, flags)
                    r = {
                        "test_accuracy": run["test_accuracy"],
                        "bytes_per_epoch": run["bytes_per_epoch"],
                    }
                entry["runs"][key] = r
                print(name, key, r["test_accuracy"], flush=True)
                save()


def run_replication(args: argparse.Namespace, res: dict, save) -> None:
    """Armada Sec. 5's replicated high-degree nodes: bytes, time, loss; Cora's accuracy."""
    stamp(res, "replication", SCRIPT, fresh=True)
    store, hp, _ = setup(args, "200k", 2)
    rp = res["replication"] = {"speed": {}, "accuracy": {}}
    b = args.batch_workers
    for top in args.tops.split(","):
        r = rp["speed"][top] = timed(
            store, hp, b + 1, disagg_flags(batch_workers=b, replicate_top=top), 2
        )
        print("replicate", top, r["median_epoch_seconds"], r["disagg"]["sample_bytes"], flush=True)
        save()
    for name in args.datasets.split(","):
        hp = hparams(name, args.smoke)
        store = dataset_store(name, 2)[1]
        runs = rp["accuracy"].setdefault(name, {})
        for seed in range(args.seeds):
            for top in args.accuracy_tops.split(","):
                flags = disagg_flags(batch_workers=b, replicate_top=top)
                run = launch(store, "disagg", b + 1, hp, seed, flags)
                runs[f"{top}/seed{seed}"] = {"test_accuracy": run["test_accuracy"]}
                print(name, top, seed, run["test_accuracy"], flush=True)
                save()


def run_replicas(args: argparse.Namespace, res: dict, save) -> None:
    """A compute worker's G replicas in threads against one after the other."""
    stamp(res, "replicas", SCRIPT, fresh=True)
    store, hp, _ = setup(args, "200k", 2, hidden=args.hidden)
    rs = res["replicas"] = {}
    for g in ints(args.groups):
        for mode in args.exec.split(","):
            flags = disagg_flags(replicas=g, replica_exec=mode)
            r = rs[f"G{g}/{mode}"] = timed(store, hp, 2, flags, 2)
            print("replicas", g, mode, r["median_epoch_seconds"], r["last_loss"], flush=True)
            save()


def run_swapped(args: argparse.Namespace, res: dict, save) -> None:
    """Swapped-out parts sampled from the store against the paper's footnote 1 (none)."""
    stamp(res, "swapped", SCRIPT, fresh=True)
    store, hp, _ = setup(args, "200k", 2)
    sw = res["swapped"] = {}
    for mode in args.modes.split(","):
        flags = disagg_flags(resident_parts=args.resident_parts, swapped_neighbours=mode)
        r = sw[mode] = timed(store, hp, 2, flags, 2)
        print("swapped", mode, r["median_epoch_seconds"], r["disagg"]["disk_sampled"], flush=True)
        save()


# ----------------------------------------------------------------------------- report
def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _mb(x: float) -> str:
    return f"{x / 1e6:.1f}"


def _mean(xs: list[float]) -> str:
    if not xs:
        return "-"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.3f} ± {sd:.3f} ({len(xs)})"


def _accs(runs: dict, kind: str) -> list[float]:
    return [r["test_accuracy"] for k, r in runs.items() if k.startswith(kind + "/")]


def setup_text(rows) -> str:
    """The model and store of ``rows`` (each distinct one once)."""
    said = []
    for r in rows:
        hp = r["hparams"]
        t = f"{hp['model']} {hp['fanouts']}, batch {hp['batch_size']}, hidden {hp['hidden']}, "
        t += f"{r['parts']}-part store"
        if t not in said:
            said.append(t)
    return "; ".join(said)


def _send_wait(r: dict) -> str:
    """The batch workers' mean time blocked on a full queue (rows of the custom worker that
    recorded every rank's split; shoal train's JSON holds rank 0's)."""
    ws = [t["send_wait"] for t in r.get("time_split_ranks", []) if "send_wait" in t]
    return f"{statistics.mean(ws):.2f}" if ws else "-"


def scaling_md(res: dict) -> list[str]:
    sc = res["scaling"]
    parts = [k for k in res["parts"] if k.startswith("scaling ")]
    lines = [
        "## Throughput against batch workers (1 compute worker)",
        "",
        f"{setup_text(sc.values())}. 'CPU per process': a cgroup CFS quota per rank "
        "(`--cpu`), emulating one machine per rank; '-': the ranks share this machine's cores. "
        "Seeds/s: training nodes per second (per epoch: "
        + ", ".join(sorted({f"{r['training_nodes']:,}" for r in sc.values()}))
        + "); iterations grow with the batch workers, since each worker's parts end in a "
        "partial batch. Rows: " + " ".join(provenance(res, p) for p in parts),
        "",
        "| graph | hidden | CPU per process | batch workers | processes | seeds/s "
        "| iterations | iterations/s | epoch s | compute worker waiting for batches s "
        "| assembling s | computing s | batch workers waiting to send s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, r in sc.items():
        name, b = key.split("/")[0], int(key.rsplit("/B", 1)[1])
        c = r.get("cpu_per_process")
        cpu = f"{c:g} (compute {r.get('cpu_compute_worker') or c:g})" if c else "-"
        ts = r["time_split_rank0"]
        lines.append(
            f"| {name} | {r['hparams']['hidden']} | {cpu} | {b} | {b + 1} | "
            f"{r['training_nodes'] / r['median_epoch_seconds']:.0f} | {r['iterations']} | "
            f"{r['iterations_per_second']:.2f} | {r['median_epoch_seconds']:.2f} | "
            f"{ts.get('receive_wait', 0):.2f} | "
            + (f"{ts['assemble']:.2f} | " if "assemble" in ts else "- | ")
            + f"{ts.get('forward_backward', 0) + ts.get('allreduce', 0):.2f} | {_send_wait(r)} |"
        )
    return [*lines, ""]


def bytes_md(res: dict) -> list[str]:
    by = res["bytes"]
    g = {r["settings"]["replicas"] for r in by.values()}
    lines = [
        "## Bytes per epoch: grouping and the compute-worker cache",
        "",
        f"{setup_text(by.values())}; 1 batch worker, 1 compute worker with G = "
        f"{', '.join(map(str, sorted(g)))} replicas. Rows: {provenance(res, 'bytes')}",
        "",
        "| batches | cache | batch MB/epoch | rows sent | hit rate | update MB | epoch s |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, r in by.items():
        grouping, cache = key.split("/")
        d = r["disagg"]
        lines.append(
            f"| {grouping} | {cache} | {d['batch_bytes'] / 1e6:.1f} | {int(d['rows_sent'])} | "
            f"{d['hit_rate']:.2f} | {d['update_bytes'] / 1e6:.2f} | "
            f"{r['median_epoch_seconds']:.2f} |"
        )
    return [*lines, ""]


def speed_md(res: dict) -> list[str]:
    sp = res["speed"]
    lines = [
        "## Epoch time against minibatch (same processes)",
        "",
        f"{setup_text(sp.values())}; disagg with one compute worker, the other processes "
        f"batch workers. Rows: {provenance(res, 'speed')}",
        "",
        "| engine | processes | median epoch s | MB sent/epoch |",
        "|---|---|---|---|",
    ]
    for key, r in sp.items():
        eng, n = key.split("/")
        lines.append(
            f"| {eng} | {n} | {r['median_epoch_seconds']:.2f} | "
            f"{r['comm']['bytes_sent'] / 1e6:.1f} |"
        )
    return [*lines, ""]


def accuracy_md(res: dict) -> list[str]:
    acc = res["accuracy"]
    lines = [
        "## Accuracy (2 parts; batch workers + 1 compute worker)",
        "",
        "bench/hec.py's hyper-parameters (batches of 16 seeds); test accuracy at the best "
        "validation epoch, mean ± standard deviation (seeds).",
        "",
        "| graph | batch workers | single | disagg | diff | disagg --local-sampling | diff |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, e in acc.items():
        s0, d, lo = (_accs(e["runs"], k) for k in ("single", "disagg", "local"))
        m0 = statistics.mean(s0) if s0 else float("nan")
        diff = [f"{(statistics.mean(x) - m0) * 100:+.1f}" if x and s0 else "-" for x in (d, lo)]
        lines.append(
            f"| {name} | {e['batch_workers']} | {_mean(s0)} | {_mean(d)} | {diff[0]} | "
            f"{_mean(lo)} | {diff[1]} |"
        )
    rows = [f"- {name}: {provenance(res, f'accuracy {name}')}" for name in acc]
    return [*lines, "", *rows, ""]


def replication_md(res: dict) -> list[str]:
    rp = res["replication"]
    lines = []
    if rp.get("speed"):
        bw = {r["settings"]["batch_workers"] for r in rp["speed"].values()}
        lines += [
            "## High-degree replication (Armada Sec. 5)",
            "",
            f"{setup_text(rp['speed'].values())}; {', '.join(map(str, sorted(bw)))} batch "
            "workers, 1 compute worker. Every batch worker keeps the neighbour lists and rows "
            "of the top nodes by in-degree. Sampling / pull MB: bytes the batch workers sent "
            "each other per epoch (sampling requests and answers; feature-row pulls), summed "
            "over them. Requests: frontier nodes sent to their owner to sample; from replica: "
            "sampled locally instead; saved MB: those requests' bytes (id out, count and picks "
            "back). Loss / train acc.: the last epoch's. Rows: " + provenance(res, "replication"),
            "",
            "| replicate top | replica MB per worker | sampling MB | pull MB | requests | "
            "from replica | saved MB | rows from replica | epoch s | loss | train acc. |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for top, r in rp["speed"].items():
            d = r["disagg"]
            lines.append(
                f"| {top} | {_mb(d['replica_bytes'] / r['settings']['batch_workers'])} | "
                f"{_mb(d['sample_bytes'])} | {_mb(d['pull_bytes'])} | "
                f"{int(d['remote_requests'])} | {int(d['replica_sampled'])} | "
                f"{_mb(d['replica_saved_bytes'])} | {int(d['replica_rows'])} | "
                f"{r['median_epoch_seconds']:.2f} | {r['last_loss']:.4f} | "
                f"{r['last_train_accuracy']:.4f} |"
            )
        lines.append("")
    if rp.get("accuracy"):
        lines += [
            "Test accuracy (2 parts, the batch workers above, 1 compute worker, bench/hec.py's "
            "hyper-parameters):",
            "",
            "| graph | replicate top | test accuracy | diff against none |",
            "|---|---|---|---|",
        ]
        for name, runs in rp["accuracy"].items():
            tops = list(dict.fromkeys(k.split("/")[0] for k in runs))
            base = _accs(runs, tops[0])
            for t in tops:
                xs = _accs(runs, t)
                diff = f"{100 * (statistics.mean(xs) - statistics.mean(base)):+.1f}"
                lines.append(f"| {name} | {t} | {_mean(xs)} | {diff if t != tops[0] else '-'} |")
        lines.append("")
    return lines


def replicas_md(res: dict) -> list[str]:
    lines = [
        "## Parallel replicas",
        "",
        f"{setup_text(res['replicas'].values())}; 1 batch worker, 1 compute worker. A compute "
        "worker's G replicas in G threads (weights shared, gradients summed in replica order) "
        "against one after the other; one intra-op thread per process. Rows: "
        + provenance(res, "replicas"),
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
    return [*lines, ""]


def swapped_md(res: dict) -> list[str]:
    sw = res["swapped"]
    resident = {r["settings"]["resident_parts"] for r in sw.values()}
    lines = [
        "## Swapped-out parts",
        "",
        f"{setup_text(sw.values())}; 1 batch worker, `--resident-parts` "
        f"{', '.join(map(str, resident))}. read: a node of a part swapped out at its batch "
        "worker is sampled from the store's files (the draws of a resident part); skip: it "
        f"gets no neighbours (the paper's footnote 1). Rows: {provenance(res, 'swapped')}",
        "",
        "| swapped neighbours | sampled from the store | MB read for them | "
        "without neighbours | epoch s | loss | train acc. |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, r in sw.items():
        d = r["disagg"]
        lines.append(
            f"| {mode} | {int(d['disk_sampled'])} | {_mb(d['disk_bytes'])} | "
            f"{int(d['unavailable'])} | {r['median_epoch_seconds']:.2f} | "
            f"{r['last_loss']:.4f} | {r['last_train_accuracy']:.4f} |"
        )
    return [*lines, ""]


def notes(res: dict) -> list[str]:
    """Observations computed from the results."""
    out = []
    groups: dict[str, list[tuple[int, dict]]] = {}
    for key, r in res.get("scaling", {}).items():
        head, b = key.rsplit("/B", 1)
        groups.setdefault(head, []).append((int(b), r))
    for head, rows in groups.items():
        sps = {b: r["training_nodes"] / r["median_epoch_seconds"] for b, r in sorted(rows)}
        best = max(sps, key=sps.__getitem__)
        quota = "with a CPU quota per rank" if "/cpu" in head else "no CPU quota"
        out.append(
            f"- Scaling, {head.replace('/', ' ')} ({quota}): seeds/s "
            + ", ".join(f"{v:.0f}" for v in sps.values())
            + f" for {min(sps)}-{max(sps)} batch workers; the most at {best} "
            f"({sps[best] / sps[min(sps)]:.2f}x the first)."
        )
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
    for n in sorted({k.split("/")[1] for k in sp}):
        if f"disagg/{n}" in sp and f"minibatch/{n}" in sp:
            ratio = (
                sp[f"disagg/{n}"]["median_epoch_seconds"]
                / sp[f"minibatch/{n}"]["median_epoch_seconds"]
            )
            out.append(f"- Epoch time, {n} processes: disagg / minibatch = {ratio:.2f}.")
    rs = res.get("replication", {}).get("speed", {})
    if "0" in rs:
        base = rs["0"]
        b0 = base["disagg"]["sample_bytes"] + base["disagg"]["pull_bytes"]
        for top, r in rs.items():
            if top != "0":
                b = r["disagg"]["sample_bytes"] + r["disagg"]["pull_bytes"]
                out.append(
                    f"- Replication {top}: sampling + pull bytes between batch workers "
                    f"{b / b0:.2f}x of no replication, epoch time "
                    f"{r['median_epoch_seconds'] / base['median_epoch_seconds']:.2f}x."
                )
    reps = res.get("replicas", {})
    for g in sorted({k.split("/")[0] for k in reps}):
        a, b = reps.get(f"{g}/sequential"), reps.get(f"{g}/threads")
        if a and b:
            out.append(
                f"- Replicas G = {g[1:]}: threads / sequential epoch time = "
                f"{b['median_epoch_seconds'] / a['median_epoch_seconds']:.2f}; last loss "
                f"{a['last_loss']:.5f} vs {b['last_loss']:.5f}."
            )
    for name, e in res.get("accuracy", {}).items():
        s0 = _accs(e["runs"], "single")
        for kind in ("disagg", "local"):
            xs = _accs(e["runs"], kind)
            if s0 and xs:
                d = 100 * (statistics.mean(xs) - statistics.mean(s0))
                verdict = "within" if abs(d) <= 1.0 else "outside"
                out.append(
                    f"- Accuracy, {name}, {kind} ({len(xs)} seeds) against single "
                    f"({len(s0)}): {d:+.1f} points, {verdict} 1 point."
                )
    return ["## Notes (computed from the tables)", "", *out, ""]


SECTIONS = {
    "scaling": scaling_md,
    "bytes": bytes_md,
    "speed": speed_md,
    "accuracy": accuracy_md,
    "replication": replication_md,
    "replicas": replicas_md,
    "swapped": swapped_md,
}


def render(res: dict) -> str:
    lines = parts_header(
        "disagg engine (Armada): batch workers feeding compute workers",
        res,
        "Rendered from disagg.json by bench/disagg.py (any part, or `python bench/disagg.py "
        "report`); each section names the commands, commits and machine of its rows. Every "
        "process runs one thread.",
    )
    for key, section in SECTIONS.items():
        if res.get(key):
            lines += section(res)
    return "\n".join(lines + notes(res))


# ----------------------------------------------------------------------------- main
PARTS = {
    "scaling": run_scaling,
    "bytes": run_bytes,
    "speed": run_speed,
    "accuracy": run_accuracy,
    "replication": run_replication,
    "replicas": run_replicas,
    "swapped": run_swapped,
}


def main() -> None:
    ap = bench_args(
        argparse.ArgumentParser(description=__doc__.split("\n\n")[0]), out="bench/results/disagg"
    )
    sub = ap.add_subparsers(dest="cmd")
    s = sub.add_parser("scaling")
    s.add_argument("--graphs", default="200k,1m")
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
        help="CPU quota per process in cores (cgroup v1 cpu controller, root; 0: none). "
        "0.5 with 1 compute and up to 3 batch workers fills 2 cores exactly",
    )
    s.add_argument(
        "--compute-cpu",
        type=float,
        default=0.0,
        help="the compute worker's quota instead of --cpu (a compute worker faster than one "
        "batch worker, as a GPU is in the paper)",
    )
    b = sub.add_parser("bytes")
    b.add_argument("--replicas", type=int, default=2)
    b.add_argument("--groupings", default="grouped,ungrouped")
    b.add_argument("--caches", default="0,5%,20%")
    sp = sub.add_parser("speed")
    sp.add_argument("--nproc", default="2,3")
    sp.add_argument("--engines", default="minibatch,disagg")
    a = sub.add_parser("accuracy")
    a.add_argument("--datasets", default="cora,amazon_photo,coauthor_physics")
    a.add_argument("--seeds", type=int, default=10)
    a.add_argument("--local-seeds", type=int, default=3)
    a.add_argument("--batch-workers", type=int, default=2)
    r = sub.add_parser("replication")
    r.add_argument("--tops", default="0,0.1%,1%,5%")
    r.add_argument("--batch-workers", type=int, default=2)
    r.add_argument("--datasets", default="cora")
    r.add_argument("--seeds", type=int, default=3)
    r.add_argument("--accuracy-tops", default="0,1%")
    rp = sub.add_parser("replicas")
    rp.add_argument("--groups", default="2,4", help="replica counts G")
    rp.add_argument("--exec", default="sequential,threads")
    rp.add_argument("--hidden", type=int, default=256)
    w = sub.add_parser("swapped")
    w.add_argument("--modes", default="read,skip")
    w.add_argument("--resident-parts", type=int, default=1)
    for p in (s, b, sp, r, rp, w):
        p.add_argument("--epochs", type=int, default=2, help="timed epochs (after one more)")
    sub.add_parser("report")
    args = ap.parse_args()
    if args.cmd is None and not args.smoke:
        ap.error("name a part (" + ", ".join(PARTS) + ", report), or --smoke for all")
    prefix = out_prefix(args, "bench/results/disagg")
    res = {} if args.smoke else load_json(prefix.with_suffix(".json"))

    def save() -> None:
        write_results(prefix, res, render)

    run_parts(ap, args, PARTS, SMOKE, res, save, prefix=prefix)
    save()


if __name__ == "__main__":
    main()
