"""Resume on another number of processes (issue 36): 2 -> 3 -> 2 against an uninterrupted run.

For each seed: ``shoal train --store STORE --engine E --nproc 2 --epochs 30`` uninterrupted,
and the same run killed (SIGKILL to the launcher and every process below it, as when a
machine is lost) during epoch 10, resumed with ``--nproc 3 --resume``, killed again
during epoch 20 and resumed with ``--nproc 2 --resume`` to the end (``--checkpoint-dir``
throughout). The table gives both runs' test accuracy (at the best validation epoch), their
difference (mean over the seeds), the epochs each phase committed and the per-rank batch of
each phase (``minibatch`` keeps the global batch of 2 x 512 seeds).

Graph: ``shoal data synth dcsbm --nodes 50000 --edges 500000 --features 64`` (5,000 training
nodes, 40,000 test nodes) in 6 parts (ldg) with halo features, so 2 and 3 processes each hold
whole parts.

Usage: ``python bench/elastic.py [--engines minibatch,averaging] [--seeds 3] [--out
bench/results/elastic]``
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import time
from pathlib import Path

from common import (
    SHOAL,
    WORK,
    command_line,
    machine_line,
    synth_store,
    write_json,
    write_text_atomic,
)

EPOCHS = 30
KILL_AT = (10, 20)  # killed while training these epochs (counted from 1)


def train_args(store: Path, engine: str, seed: int, out: Path) -> list[str]:
    args = ["train", "--store", store, "--engine", engine, "--model", "sage"]
    args += ["--fanouts", "10,5", "--hidden", "64", "--batch-size", "512", "--lr", "0.01"]
    args += ["--epochs", EPOCHS, "--seed", seed, "--threads", "1", "--no-progress"]
    args += ["--eval-every", "1", "--json", out]
    return [*SHOAL, *map(str, args)]


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


def run(cmd: list[str], *, kill_during: int | None, metrics: Path) -> int | None:
    """Run ``cmd``; with ``kill_during`` SIGKILL its process group once ``metrics`` shows
    the epoch before it done. Returns the exit code (None when killed)."""
    p = subprocess.Popen(
        cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    while p.poll() is None:
        if kill_during is not None and metrics.exists():
            done = metrics.read_text().count("\n")
            if done >= kill_during - 1:
                time.sleep(0.5)  # into the epoch
                kill_tree(p.pid)
                p.wait()
                return None
        time.sleep(0.1)
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr.read()[-3000:]}")
    return p.returncode


def one(store: Path, engine: str, seed: int, work: Path) -> dict:
    ref_out = work / f"{engine}-{seed}-ref.json"
    ref_cmd = [*train_args(store, engine, seed, ref_out), "--nproc", "2"]
    run(ref_cmd, kill_during=None, metrics=work / "none")
    ref = json.loads(ref_out.read_text())
    ckpt, out = work / f"ckpt-{engine}-{seed}", work / f"{engine}-{seed}-elastic.json"
    metrics = work / f"{engine}-{seed}-metrics.jsonl"
    for p in (ckpt, metrics):
        subprocess.run(["rm", "-rf", str(p)], check=True)
    base = [*train_args(store, engine, seed, out), "--checkpoint-dir", str(ckpt)]
    base += ["--metrics-file", str(metrics)]
    phases = []
    for nproc, kill in ((2, KILL_AT[0]), (3, KILL_AT[1]), (2, None)):
        cmd = [*base, "--nproc", str(nproc)] + (["--resume"] if phases else [])
        run(cmd, kill_during=kill, metrics=metrics)
        last = json.loads((ckpt / "last.json").read_text())
        phases.append({"nproc": nproc, "committed_epoch": last["epoch"], "killed": kill})
    got = json.loads(out.read_text())
    return {
        "engine": engine,
        "seed": seed,
        "uninterrupted": ref["test_accuracy"],
        "elastic": got["test_accuracy"],
        "phases": phases,
        "batch_size_last_phase": got["config"]["sampling"]["batch_size"],
        "epochs": got["epochs"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", default="minibatch,averaging")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", default="bench/results/elastic")
    a = ap.parse_args(argv)
    work = WORK / "elastic"
    work.mkdir(parents=True, exist_ok=True)
    store = synth_store(work, 6)
    res = {"machine": machine_line(), "command": command_line("elastic.py", argv), "runs": []}
    for engine in a.engines.split(","):
        for seed in range(a.seeds):
            r = one(store, engine, seed, work)
            print(json.dumps(r), flush=True)
            res["runs"].append(r)
    write_json(a.out + ".json", res)
    write_text_atomic(a.out + ".md", render(res))
    return 0


def render(res: dict) -> str:
    lines = [
        "# Resuming on another number of processes: 2 -> 3 -> 2 (issue 36)",
        "",
        f"Command: `{res['command']}` ({res['machine']}).",
        "",
        f"`shoal train --store STORE --engine E --nproc 2 --epochs {EPOCHS} --batch-size 512 "
        "--model sage --fanouts 10,5 --hidden 64 --lr 0.01 --eval-every 1` on a 50k-node DCSBM "
        "store in 6 parts, uninterrupted, against the same run killed (SIGKILL to the launcher "
        f"and its workers) during epoch {KILL_AT[0]}, resumed with `--nproc 3 --resume`, killed "
        f"during epoch {KILL_AT[1]} and resumed with `--nproc 2 --resume` to the end. Test "
        "accuracy at the best validation epoch.",
        "",
        "| engine | seeds | uninterrupted (mean) | 2 -> 3 -> 2 (mean) | difference | epochs "
        "committed at each kill | per-rank batch, last phase |",
        "|---|---|---|---|---|---|---|",
    ]
    engines = dict.fromkeys(r["engine"] for r in res["runs"])
    for e in engines:
        rs = [r for r in res["runs"] if r["engine"] == e]
        u = statistics.mean(r["uninterrupted"] for r in rs)
        x = statistics.mean(r["elastic"] for r in rs)
        kills = "; ".join(", ".join(str(p["committed_epoch"]) for p in r["phases"][:2]) for r in rs)
        lines.append(
            f"| {e} | {len(rs)} | {u:.4f} | {x:.4f} | {100 * (x - u):+.2f} points | {kills} | "
            f"{rs[0]['batch_size_last_phase']} |"
        )
    lines += [
        "",
        "Per seed: "
        + "; ".join(
            f"{r['engine']} seed {r['seed']}: {r['uninterrupted']:.4f} / {r['elastic']:.4f}"
            for r in res["runs"]
        )
        + ".",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
