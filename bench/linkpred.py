"""Link prediction (issue 15): MRR and Hits@50 of GraphSAGE against a heuristic.

Each graph (default: Cora and CiteSeer, citation; Facebook page-page, social) is imported
once and its edges split (``shoal data split-edges --val 0.05 --test 0.1 --seed 0``); then,
per seed, the kinds of :data:`KINDS`:

- ``adamic-adar``: the heuristic on the message-passing graph (no training; the same held-out
  edges and the same fixed negatives as the runs, drawn from the seed as the link task (``shoal.training.tasks.LinkTask``)
  draws them);
- ``features``: ``shoal train --task link`` on the graph's features; ``embeddings``: on
  learned node embeddings only (``--embedding-dim 64``);
- ``features-2p`` / ``embeddings-2p``: the same with ``--engine minibatch --nproc 2`` on a
  2-part SPRING store of the split graph, each rank with half the batch (the same global batch
  and steps per epoch as 1 process) and one thread (1 process also runs one thread).

Every held-out test edge is ranked against 100 uniform negatives (OGB's rank, ties averaged).
Targets: GraphSAGE beats the heuristic on at least two of the three graphs; 2 processes are
within 1 MRR point of 1.

Usage::

    python bench/linkpred.py run [--graphs cora,...] [--seeds 0,1,2] [--epochs 20] [--kinds ...]
    python bench/linkpred.py report     # re-render the .md from the .json

Runs are kept in the JSON and skipped when run again with the same epochs (a run with other
epochs is replaced); every command that added runs is listed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
from pathlib import Path

import common

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


def prepare(name: str) -> Path:
    """The imported graph's edge split (made once)."""
    s = common.WORK / "linkpred" / f"{name}-link"
    if not (s / "meta.json").exists():
        g = common.dataset_graph(name)
        split = ["--val", "0.05", "--test", "0.1", "--seed", "0"]
        common.shoal("data", "split-edges", g, *split, "--out", s, "--overwrite")
    return s


def train(split: Path, seed: int, epochs: int, embedding: bool, nproc: int) -> dict:
    tag = f"{split.name}-{seed}-{'emb' if embedding else 'feat'}-{nproc}p"
    edir = common.WORK / "linkpred" / f"emb-{tag}"
    shutil.rmtree(edir, ignore_errors=True)
    emb = ["--embedding-dim", 64, "--embedding-dir", edir] if embedding else []
    if nproc == 1:
        where = ["--graph", split]
    else:
        store = common.partitioned_store(split, 2, algo="spring", halo_features=False)
        where = ["--store", store, "--engine", "minibatch", "--nproc", nproc]
    hp = {**HP, "batch_size": HP["batch_size"] // nproc, "epochs": epochs, "seed": seed}
    flags = [f"--fanouts={hp.pop('fanouts')}"]
    flags += [a for k, v in hp.items() for a in (f"--{k.replace('_', '-')}", v)]
    d = common.train(
        *where,
        "--task",
        "link",
        *flags,
        "--threads",
        1,
        "--no-progress",
        *emb,
        out=common.WORK / "linkpred" / f"run-{tag}.json",
    )
    return {
        "test_mrr": d["test_mrr"],
        "val_mrr": d["val_mrr"],
        "test_hits@50": d["test_hits@50"],
        "seconds_per_epoch": d["seconds_per_epoch"],
        "epochs": epochs,
        "load_after": os.getloadavg()[0],
    }


def heuristic(split: Path, seed: int) -> dict:
    """Adamic-Adar on the test edges against the same negatives as the link task (seeded)."""
    import numpy as np

    from shoal.data.format import GraphDir
    from shoal.training.linkdata import eval_negatives
    from shoal.training.linkheuristics import heuristic_scores
    from shoal.training.linkmetrics import mrr_hits

    g = GraphDir.open(split)
    csr = g.csr("in")
    pos = np.asarray(g.link_edges("test"), np.int64)
    neg = eval_negatives(seed, "test", len(pos), g.num_nodes, HP["eval_negatives"])
    sp = heuristic_scores(csr.indptr, csr.indices, pos)
    pairs = np.stack([np.repeat(pos[:, 0], neg.shape[1]), neg.ravel()], axis=1)
    sq = heuristic_scores(csr.indptr, csr.indices, pairs).reshape(len(pos), -1)
    m = mrr_hits(sp, sq, ks=(50,))
    return {"test_mrr": m["mrr"], "test_hits@50": m["hits@50"]}


def run(args: argparse.Namespace, prefix: Path) -> None:
    res = {} if args.smoke else common.load_json(prefix.with_suffix(".json"))
    cmd = common.command_line("linkpred.py")
    cmds = res.setdefault("commands", {})
    if cmd not in cmds.values():
        cmds[f"run {len(cmds) + 1}"] = cmd
    res.update(machine=common.machine_line(threads=1), hparams=dict(HP))
    runs = res.setdefault("runs", {})
    for name in args.graphs.split(","):
        split = prepare(name)
        for seed in map(int, args.seeds.split(",")):
            for kind in args.kinds.split(","):
                key = f"{name}/{kind}/seed{seed}"
                done = runs.get(key)
                if done is not None and done.get("epochs", args.epochs) == args.epochs:
                    continue
                if kind == "adamic-adar":
                    runs[key] = heuristic(split, seed)
                else:
                    nproc = 2 if kind.endswith("-2p") else 1
                    emb = kind.startswith("embeddings")
                    runs[key] = train(split, seed, args.epochs, emb, nproc)
                print(key, round(runs[key]["test_mrr"], 4), flush=True)
                common.write_results(prefix, res, render)


def _mean(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs) if len(xs) > 1 else 0.0:.3f}"


def _targets(runs: dict, names: list[str]) -> list[str]:
    """The issue's two targets, computed from the runs (mean test MRR over seeds)."""

    def of(name: str, kind: str) -> dict[str, float]:
        pre = f"{name}/{kind}/"
        return {k.rsplit("/", 1)[1]: r["test_mrr"] for k, r in runs.items() if k.startswith(pre)}

    def mrr(name: str, kind: str) -> float | None:
        xs = list(of(name, kind).values())
        return statistics.mean(xs) if xs else None

    out = ["", "## Targets", ""]
    beats = [n for n in names if (mrr(n, "features") or 0) > (mrr(n, "adamic-adar") or 1)]
    out.append(
        f"- GraphSAGE (features) beats Adamic-Adar on {len(beats)} of {len(names)} graphs "
        f"({', '.join(beats) or 'none'}); target: at least two."
    )
    for kind in ("features", "embeddings"):
        for n in names:
            one, two = of(n, kind), of(n, f"{kind}-2p")
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


def render(res: dict) -> str:
    runs = res.get("runs", {})
    lines = common.header(
        "Link prediction: GraphSAGE against Adamic-Adar",
        res,
        "Test MRR and Hits@50 of each held-out test edge ranked against 100 uniform negatives "
        "(ties averaged); mean ± sd over seeds. `-2p`: `--engine minibatch --nproc 2` on a "
        "2-part SPRING store, half the batch per rank (the same global batch); "
        f"hyper-parameters: `{json.dumps(res.get('hparams', {}))}`.",
    )
    lines += [
        "| graph | method | seeds | epochs | test MRR | test Hits@50 | s/epoch |",
        "|---|---|---|---|---|---|---|",
    ]
    names = sorted({k.split("/")[0] for k in runs})
    for name in names:
        for kind in KINDS:
            rs = [r for k, r in runs.items() if k.startswith(f"{name}/{kind}/")]
            if not rs:
                continue
            trained = "seconds_per_epoch" in rs[0]
            sec = _mean([r["seconds_per_epoch"] for r in rs]) if trained else "-"
            ep = ",".join(sorted({str(r["epochs"]) for r in rs})) if trained else "-"
            lines.append(
                f"| {name} | {kind} | {len(rs)} | {ep} | {_mean([r['test_mrr'] for r in rs])} "
                f"| {_mean([r['test_hits@50'] for r in rs])} | {sec} |"
            )
    loads = [r["load_after"] for r in runs.values() if "load_after" in r]
    trained = sum(1 for r in runs.values() if "seconds_per_epoch" in r)
    note = f"s/epoch: {len(loads)} of {trained} trained runs recorded the 1-minute load after them"
    note += f" (median {statistics.median(loads):.1f}, max {max(loads):.1f})" if loads else ""
    if len(loads) < trained:
        note += "; the others did not record it"
    lines += ["", note + ": compare times within one graph and seed."]
    return "\n".join(lines + _targets(runs, names)) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.bench_args(ap, out="bench/results/linkpred")
    sub = ap.add_subparsers(dest="cmd")
    r = sub.add_parser("run", help="train and score (runs already in the JSON are kept)")
    r.add_argument("--graphs", default=",".join(GRAPHS))
    r.add_argument("--seeds", default="0,1,2")
    r.add_argument("--epochs", type=int, default=20)
    r.add_argument("--kinds", default=",".join(KINDS))
    sub.add_parser("report", help="re-render the .md from the .json")
    args = ap.parse_args()
    prefix = common.out_prefix(args, "bench/results/linkpred")
    if args.smoke:  # both sub-commands: the heuristic and one 2-process run (the 1-process
        # runs differ only by --graph in place of --store/--engine/--nproc)
        args.graphs, args.seeds, args.epochs = "cora", "0", 1
        args.kinds = "adamic-adar,embeddings-2p"
    elif args.cmd is None:
        ap.error("a sub-command is needed: run or report")
    if args.smoke or args.cmd == "run":
        run(args, prefix)
    if args.smoke or args.cmd == "report":
        res = common.load_json(prefix.with_suffix(".json"))
        common.write_text_atomic(prefix.with_suffix(".md"), render(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
