"""Resume on another number of processes (issue 36): 2 -> 3 -> 2 against an uninterrupted run.

For each engine and seed: ``shoal train --store STORE --engine E --nproc 2 --epochs 30``
uninterrupted, and the same run (``--checkpoint-dir``, ``--metrics-file``) killed (SIGKILL to
the launcher and every process below it, as when a machine is lost) during epoch 10, resumed
with ``--nproc 3 --resume``, killed again during epoch 20 and resumed with ``--nproc 2
--resume`` to the end (``--nprocs`` and ``--kill-at`` choose the phases). The table gives both
runs' test accuracy (at the best validation epoch), their difference (mean over the seeds),
the epochs committed at each kill and the per-rank batch of the last phase (``minibatch``
keeps the global batch of 2 x 512 seeds).

Graph: ``common.GRAPHS["50k"]`` (``shoal data synth dcsbm --nodes 50000 --edges 500000
--features 64``: 5,000 training nodes, 40,000 test nodes) in 6 parts (ldg) with halo
features, so 2 and 3 processes each hold whole parts. ``--smoke``: the smoke graph, one
engine and seed, a run killed during epoch 2 on 2 processes and resumed on 1, without the
uninterrupted run.

Usage: ``python bench/elastic.py [--engines minibatch,averaging] [--seeds 3] [--epochs 30]
[--nprocs 2,3,2] [--kill-at 10,20] [--out bench/results/elastic]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import time
from pathlib import Path

import common

NAME = "bench/results/elastic"
PARTS = 6
FLAGS = ["--model", "sage", "--fanouts", "10,5", "--hidden", "64", "--batch-size", "512"]
FLAGS += ["--lr", "0.01", "--threads", "1", "--no-progress", "--eval-every", "1"]
SMOKE = "--graph smoke --engines minibatch --seeds 1 --epochs 8 --nprocs 2,1 --kill-at 2"


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True)
    children: dict[int, list[int]] = {}
    for line in out.stdout.splitlines():
        c, parent = map(int, line.split())
        children.setdefault(parent, []).append(c)
    found, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it (torch's launcher starts its workers in
    sessions of their own: killing the launcher's group alone leaves them training)."""
    for q in [pid, *_descendants(pid)]:
        try:
            os.kill(q, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run(cmd: list[str], *, kill_during: int | None = None, metrics: Path | None = None) -> None:
    """Run ``cmd``; with ``kill_during`` SIGKILL it and its descendants once ``metrics`` shows
    the epoch before it done (and half a second more, into the epoch)."""
    p = subprocess.Popen(
        cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    while p.poll() is None:
        if kill_during is not None and metrics.exists():
            if metrics.read_text().count("\n") >= kill_during - 1:
                time.sleep(0.5)
                kill_tree(p.pid)
                p.wait()
                return
        time.sleep(0.1)
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr.read()[-3000:]}")


def one(store: Path, engine: str, seed: int, args: argparse.Namespace) -> dict:
    work = common.WORK / "elastic"
    tag = f"{store.name}-{engine}-{seed}"
    base = [*common.SHOAL, "train", "--store", str(store), "--engine", engine, *FLAGS]
    base += ["--epochs", str(args.epochs), "--seed", str(seed)]
    r = {"engine": engine, "seed": seed, "uninterrupted": None}
    if not args.smoke:
        ref = work / f"{tag}-ref.json"
        run([*base, "--nproc", "2", "--json", str(ref)])
        r["uninterrupted"] = json.loads(ref.read_text())["test_accuracy"]
    ckpt, out, metrics = work / f"ckpt-{tag}", work / f"{tag}.json", work / f"{tag}.jsonl"
    shutil.rmtree(ckpt, ignore_errors=True)
    metrics.unlink(missing_ok=True)
    base += ["--checkpoint-dir", str(ckpt), "--metrics-file", str(metrics), "--json", str(out)]
    kills = [int(k) for k in args.kill_at.split(",")] + [None]
    r["phases"] = []
    for i, (nproc, kill) in enumerate(zip(map(int, args.nprocs.split(",")), kills)):
        run(
            [*base, "--nproc", str(nproc), *(["--resume"] if i else [])],
            kill_during=kill,
            metrics=metrics,
        )
        last = json.loads((ckpt / "last.json").read_text())
        r["phases"].append({"nproc": nproc, "committed_epoch": last["epoch"], "killed": kill})
    got = json.loads(out.read_text())
    r.update(
        elastic=got["test_accuracy"],
        batch_size_last_phase=got["config"]["sampling"]["batch_size"],
        epochs=got["epochs"],
    )
    return r


def _acc(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def render(res: dict) -> str:
    nprocs, kills = res["nprocs"], res["kill_at"]
    resumed = ", ".join(
        f"killed during epoch {k}, resumed with `--nproc {n} --resume`"
        for k, n in zip(kills, nprocs[1:])
    )
    L = common.header(
        f"Resuming on another number of processes: {' -> '.join(map(str, nprocs))} (issue 36)",
        res,
        f"`shoal train --store STORE --engine E --nproc {nprocs[0]} --epochs {res['epochs']} "
        f"{' '.join(res['flags'])}` on the synthetic graph `{res['graph']}` (`shoal data synth "
        f"dcsbm {' '.join(common.synth_flags(res['synth']))}`) in {res['parts']} parts (ldg, "
        "halo features), uninterrupted, against the same run (SIGKILL to the launcher and its "
        f"workers) {resumed} to the end. Test accuracy at the best validation epoch.",
    )
    L += [
        f"| engine | seeds | uninterrupted (mean) | {' -> '.join(map(str, nprocs))} (mean) | "
        "difference | epochs committed at each kill | per-rank batch, last phase |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in dict.fromkeys(r["engine"] for r in res["runs"]):
        rs = [r for r in res["runs"] if r["engine"] == e]
        x = statistics.mean(r["elastic"] for r in rs)
        u = [r["uninterrupted"] for r in rs if r["uninterrupted"] is not None]
        diff = f"{100 * (x - statistics.mean(u)):+.2f} points" if u else "-"
        kills = "; ".join(
            ", ".join(str(p["committed_epoch"]) for p in r["phases"][:-1]) for r in rs
        )
        L.append(
            f"| {e} | {len(rs)} | {_acc(statistics.mean(u) if u else None)} | {x:.4f} | "
            f"{diff} | {kills} | {rs[0]['batch_size_last_phase']} |"
        )
    per_seed = "; ".join(
        f"{r['engine']} seed {r['seed']}: {_acc(r['uninterrupted'])} / {_acc(r['elastic'])}"
        for r in res["runs"]
    )
    return "\n".join([*L, "", f"Per seed: {per_seed}.", ""])


def main() -> None:
    ap = common.bench_args(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]), out=NAME)
    ap.add_argument("--graph", default="50k", choices=sorted(common.GRAPHS))
    ap.add_argument("--engines", default="minibatch,averaging")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--nprocs", default="2,3,2", help="processes of each phase")
    ap.add_argument("--kill-at", default="10,20", help="the epoch each phase but the last dies in")
    args = ap.parse_args()
    if args.smoke:
        args = ap.parse_args(["--smoke", *SMOKE.split()])
    store = common.partitioned_store(common.synth_graph(args.graph), PARTS)
    res = common.new_results(
        "elastic.py",
        threads=1,
        graph=args.graph,
        synth=common.GRAPHS[args.graph],
        parts=PARTS,
        flags=FLAGS,
        epochs=args.epochs,
        nprocs=[int(n) for n in args.nprocs.split(",")],
        kill_at=[int(k) for k in args.kill_at.split(",")],
        runs=[],
    )
    (common.WORK / "elastic").mkdir(parents=True, exist_ok=True)
    for engine in args.engines.split(","):
        for seed in range(args.seeds):
            r = one(store, engine, seed, args)
            print(json.dumps(r), flush=True)
            res["runs"].append(r)
    common.write_results(common.out_prefix(args, NAME), res, render)


if __name__ == "__main__":
    main()
