"""Link-prediction benchmark (issue 15): MRR and Hits@50 of GraphSAGE against a heuristic.

For each graph (default: Cora and CiteSeer, citation; Facebook page-page, social;
``--graphs coauthor_physics`` adds a collaboration graph, whose 8415-d features make a
20-epoch run take hours on 2 cores) import it, split its edges (``shoal data split-edges --val 0.05 --test
0.1 --seed 0``), then, per seed:

- ``features``: GraphSAGE on the graph's features (``shoal train --task link``);
- ``embeddings``: GraphSAGE on learned node embeddings only (``--embedding-dim 64``);
- ``adamic-adar``: the heuristic on the message-passing graph (no training; the same
  held-out edges and the same fixed negatives as the runs: ``eval_negatives`` uniform
  destinations per positive, drawn from the seed exactly as ``LinkTrainer`` draws them).

- ``features-2p`` / ``embeddings-2p``: the same on 2 processes, ``--engine minibatch
  --nproc 2`` on a 2-part SPRING store of the split graph, each rank with half the batch
  (256 positives: the same global batch of 512 and the same steps per epoch as 1 process)
  and one thread (1 process also runs one thread).

Every held-out test edge is ranked against 100 uniform negatives (OGB's rank with ties
averaged; the distributed evaluation ranks exactly the candidates of one process). Targets:
GraphSAGE beats the heuristic on at least two of the three graphs; 2 processes are within 1
MRR point of 1.

Runs are kept in the JSON and skipped when run again with the same epochs (a run of the
same graph, kind and seed with other epochs is replaced).

Usage::

    python bench/linkpred.py run [--graphs cora,...] [--seeds 0,1,2] [--epochs 20]
    python bench/linkpred.py report

Results: bench/results/linkpred.json and bench/results/linkpred.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from common import (
    PY,
    RESULTS,
    SHARED,
    WORK,
    command_line,
    load_json,
    machine_line,
    sh,
    shoal,
    write_json,
    write_text_atomic,
)

LWORK = WORK / "linkpred"
GRAPHS = ("cora", "citeseer", "facebook_pagepage")
KINDS = ("adamic-adar", "features", "embeddings", "features-2p", "embeddings-2p")
HP = dict(
    model="sage",
    fanouts="10,5",
    hidden=64,
    batch_size=512,
    lr=0.005,
    dropout=0.0,
    eval_negatives=100,
    num_neg=1,
    eval_every=2,
)


def load() -> dict:
    return load_json(RESULTS / "linkpred.json")


def save(res: dict) -> None:
    write_json(RESULTS / "linkpred.json", res)
    write_markdown(res)


def prepare(name: str) -> Path:
    g, s = LWORK / name, LWORK / f"{name}-link"
    if not (g / "meta.json").exists():
        shoal("data", "import", str(SHARED / name / "graph.npz"), "--out", str(g))
    if not (s / "meta.json").exists():
        shoal(
            "data",
            "split-edges",
            str(g),
            "--val",
            "0.05",
            "--test",
            "0.1",
            "--seed",
            "0",
            "--out",
            str(s),
        )
    return s


def store_of(split: Path, parts: int = 2) -> Path:
    """The split graph's ``parts``-part SPRING store (built once)."""
    a, s = LWORK / f"{split.name}-spring{parts}", LWORK / f"{split.name}-store{parts}"
    if not (a / "meta.json").exists():
        shoal("partition", str(split), "--algo", "spring", "--parts", str(parts), "--out", str(a))
    if not (s / "meta.json").exists():
        shoal("store", "build", str(split), str(a), "--out", str(s))
    return s


def train(split: Path, seed: int, epochs: int, embedding: bool, nproc: int = 1) -> dict:
    tag = f"{'emb' if embedding else 'feat'}{'' if nproc == 1 else f'-{nproc}p'}"
    out = LWORK / f"run-{split.name}-{seed}-{tag}.json"
    edir = LWORK / f"emb-{split.name}-{seed}-{tag}"
    emb = ["--embedding-dim", "64", "--embedding-dir", str(edir)]
    if embedding:
        import shutil

        shutil.rmtree(edir, ignore_errors=True)
    where = (
        ["--graph", str(split)]
        if nproc == 1
        else ["--store", str(store_of(split)), "--engine", "minibatch", "--nproc", str(nproc)]
    )
    t = time.perf_counter()
    sh(
        [
            PY,
            "-m",
            "shoal",
            "train",
            *where,
            "--task",
            "link",
            "--model",
            HP["model"],
            f"--fanouts={HP['fanouts']}",
            "--hidden",
            str(HP["hidden"]),
            "--batch-size",
            str(HP["batch_size"] // nproc),
            "--lr",
            str(HP["lr"]),
            "--dropout",
            str(HP["dropout"]),
            "--epochs",
            str(epochs),
            "--seed",
            str(seed),
            "--num-neg",
            str(HP["num_neg"]),
            "--eval-negatives",
            str(HP["eval_negatives"]),
            "--eval-every",
            str(HP["eval_every"]),
            "--threads",
            "1",
            "--no-progress",
            "--json",
            str(out),
            *(emb if embedding else []),
        ]
    )
    d = json.loads(out.read_text())
    return {
        "test_mrr": d["test_mrr"],
        "val_mrr": d["val_mrr"],
        "test_hits@50": d["test_hits@50"],
        "seconds_per_epoch": d["seconds_per_epoch"],
        "wall_seconds": time.perf_counter() - t,
        "epochs": epochs,
        "load_after": os.getloadavg()[0],
    }


def heuristic(split: Path, seed: int) -> dict:
    """Adamic-Adar on the test edges against the same negatives as LinkTrainer (seeded)."""
    import numpy as np

    from shoal.data.format import GraphDir
    from shoal.training.linkheuristics import heuristic_scores
    from shoal.training.linkmetrics import mrr_hits
    from shoal.training.linktrainer import eval_negatives

    g = GraphDir.open(split)
    csr = g.csr("in")
    pos = np.asarray(g.link_edges("test"), np.int64)
    neg = eval_negatives(seed, "test", len(pos), g.num_nodes, HP["eval_negatives"])
    sp = heuristic_scores(csr.indptr, csr.indices, pos)
    pairs = np.stack([np.repeat(pos[:, 0], neg.shape[1]), neg.ravel()], axis=1)
    sq = heuristic_scores(csr.indptr, csr.indices, pairs).reshape(len(pos), -1)
    m = mrr_hits(sp, sq, ks=(50,))
    return {"test_mrr": m["mrr"], "test_hits@50": m["hits@50"]}


def run(args: argparse.Namespace) -> None:
    res = load()
    cmd = command_line("linkpred.py")
    cmds = res.setdefault("commands", {})
    if cmd not in cmds.values():  # every command whose runs are in the JSON
        cmds[f"run {len(cmds) + 1}"] = cmd
    res["machine"] = machine_line()
    res["hparams"] = dict(HP)  # the epochs of each run are in its row
    runs = res.setdefault("runs", {})
    for name in args.graphs.split(","):
        split = prepare(name)
        for seed in map(int, args.seeds.split(",")):
            for kind in args.kinds.split(","):
                key = f"{name}/{kind}/seed{seed}"
                done = runs.get(key)
                if done is not None and done.get("epochs", args.epochs) == args.epochs:
                    continue  # resumable; a run with other epochs is replaced
                runs[key] = (
                    heuristic(split, seed)
                    if kind == "adamic-adar"
                    else train(
                        split,
                        seed,
                        args.epochs,
                        kind.startswith("embeddings"),
                        2 if kind.endswith("-2p") else 1,
                    )
                )
                print(key, round(runs[key]["test_mrr"], 4), flush=True)
                save(res)


def _mean(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs) if len(xs) > 1 else 0.0:.3f}"


def _targets(runs: dict, names: list[str]) -> list[str]:
    """The issue's two targets, computed from the runs (mean test MRR over seeds)."""

    def mrr(name: str, kind: str) -> float | None:
        xs = [r["test_mrr"] for k, r in runs.items() if k.startswith(f"{name}/{kind}/")]
        return statistics.mean(xs) if xs else None

    out = ["", "## Targets", ""]
    beats = [n for n in names if (mrr(n, "features") or 0) > (mrr(n, "adamic-adar") or 1)]
    out.append(
        f"- GraphSAGE (features) beats Adamic-Adar on {len(beats)} of {len(names)} graphs "
        f"({', '.join(beats) or 'none'}); target: at least two."
    )
    for kind in ("features", "embeddings"):
        for n in names:
            one = {
                k.rsplit("/", 1)[1]: r["test_mrr"]
                for k, r in runs.items()
                if k.startswith(f"{n}/{kind}/")
            }
            two = {
                k.rsplit("/", 1)[1]: r["test_mrr"]
                for k, r in runs.items()
                if k.startswith(f"{n}/{kind}-2p/")
            }
            seeds = sorted(set(one) & set(two))
            if not seeds:
                continue
            a = statistics.mean(one[s] for s in seeds)
            b = statistics.mean(two[s] for s in seeds)
            d = [100 * (two[s] - one[s]) for s in seeds]  # paired: the same seed on both sides
            se = statistics.stdev(d) / len(d) ** 0.5 if len(d) > 1 else float("nan")
            ok = "within" if abs(a - b) <= 0.01 else "NOT within"
            out.append(
                f"- {n}, {kind}: 2 processes {b:.3f} against 1 process {a:.3f} over "
                f"{len(seeds)} seeds ({100 * (b - a):+.1f} MRR points, standard error of "
                f"the paired difference {se:.1f}: {ok} 1 point)."
            )
    return out


def write_markdown(res: dict) -> None:
    runs = res.get("runs", {})
    lines = [
        "# Link prediction: GraphSAGE against Adamic-Adar",
        "",
        f"Machine: {res.get('machine', '?')}. Written by `bench/linkpred.py`. Test MRR and "
        "Hits@50 of each held-out test edge ranked against 100 uniform negatives (ties "
        "averaged); mean ± sd over seeds. `-2p`: `--engine minibatch --nproc 2` on a "
        "2-part SPRING store, 256 positives per rank (the same global batch); "
        "hyper-parameters: "
        f"`{json.dumps(res.get('hparams', {}))}`.",
        "",
        "| graph | method | seeds | epochs | test MRR | test Hits@50 | s/epoch |",
        "|---|---|---|---|---|---|---|",
    ]
    names = sorted({k.split("/")[0] for k in runs})
    for name in names:
        for kind in KINDS:
            rs = [r for k, r in runs.items() if k.startswith(f"{name}/{kind}/")]
            if rs:
                sec = (
                    _mean([r["seconds_per_epoch"] for r in rs])
                    if "seconds_per_epoch" in rs[0]
                    else "-"
                )
                ep = (
                    sorted({str(r.get("epochs", 20)) for r in rs})
                    if kind != "adamic-adar"
                    else ["-"]
                )
                lines.append(
                    f"| {name} | {kind} | {len(rs)} | {','.join(ep)} | "
                    f"{_mean([r['test_mrr'] for r in rs])} "
                    f"| {_mean([r['test_hits@50'] for r in rs])} | {sec} |"
                )
    loads = [r["load_after"] for r in runs.values() if "load_after" in r]
    trained = sum(1 for r in runs.values() if "seconds_per_epoch" in r)
    note = f"s/epoch: {len(loads)} of {trained} trained runs recorded the 1-minute load after them"
    note += f" (median {statistics.median(loads):.1f}, max {max(loads):.1f})" if loads else ""
    if len(loads) < trained:
        note += "; the others predate that record and some ran beside other jobs"
    lines += ["", note + ": compare times within one graph and seed."]
    lines += _targets(runs, names)
    lines += ["", "## Commands", ""] + [f"- {k}: `{v}`" for k, v in res.get("commands", {}).items()]
    write_text_atomic(RESULTS / "linkpred.md", "\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--graphs", default=",".join(GRAPHS))
    r.add_argument("--seeds", default="0,1,2")
    r.add_argument("--epochs", type=int, default=20)
    r.add_argument("--kinds", default=",".join(KINDS))
    sub.add_parser("report")
    args = ap.parse_args()
    LWORK.mkdir(parents=True, exist_ok=True)
    {"run": run, "report": lambda _: write_markdown(load())}[args.cmd](args)


if __name__ == "__main__":
    main()
