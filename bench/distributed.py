"""Distributed engines against the single-process trainer (issue 6): accuracy, epoch time, bytes.

``accuracy``: for each dataset (``--datasets``; hyper-parameters ``common.HPARAMS``), its
SPRING stores in p = ``--parts`` parts with halo features: the single-process trainer
(``common.single``) and every engine of ``--engines`` on ``--nproc`` processes (``shoal train
--store S --engine E --nproc N``) with the same hyper-parameters, for each seed; mean ± std of
the test accuracy and its difference from the single process.

``speed``: on a synthetic graph (``--graph``, a ``common.GRAPHS`` name, default the 200k-node
one) in 2 SPRING parts with halo features, each engine on each of ``--nprocs`` processes of 1
thread (``shoal train --json``, the same model for all: GraphSAGE, fanouts 15,10,5, hidden 256,
batch 1024, lr 0.003), ``--epochs`` epochs and one evaluation after the last: the median epoch
after the first (slowest rank), rank 0's split, bytes and messages per epoch, the speed-up.

Both parts add their runs to one results file (runs already there are kept unless ``--force``,
so a part can be resumed or extended); every command that added runs is listed in it.

Usage::

    python bench/distributed.py accuracy [--datasets cora,amazon_photo,coauthor_physics]
        [--parts 2,4] [--seeds 0,1,2] [--nproc 2] [--engines minibatch,averaging] [--epochs N]
    python bench/distributed.py speed [--graph 200k] [--epochs 3] [--nprocs 1,2] [--force]
    python bench/distributed.py report      # re-render the markdown from the JSON
    python bench/distributed.py --smoke     # both parts, tiny
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import common
from common import HPARAMS, WORK, hp_flags

NAME = "bench/results/distributed"
SPEED_FLAGS = ["--model", "sage", "--fanouts", "15,10,5", "--hidden", "256"]
SPEED_FLAGS += ["--batch-size", "1024", "--lr", "0.003", "--seed", "0", "--threads", "1"]
#: what ``--smoke`` runs: each part once, on Cora and the smoke graph, in 3 launches of one
#: process each (the 2-process launch is covered by the other scripts' smoke runs)
SMOKE = {
    "accuracy": "--datasets cora --parts 2 --seeds 0 --epochs 1 --nproc 1 --engines minibatch",
    "speed": "--graph smoke --epochs 2 --engines averaging --nprocs 1",
}


def engine_run(store: Path, engine: str, nproc: int, hp: dict, seed: int) -> dict:
    out = WORK / "distributed" / f"{store.name}-{engine}-{nproc}-{seed}.json"
    d = common.train(
        "--store", store, "--engine", engine, "--nproc", nproc, *hp_flags(hp, seed), out=out
    )
    return {k: d[k] for k in ("test_accuracy", "seconds_per_epoch", "bytes_per_epoch")}


def run_accuracy(args: argparse.Namespace, res: dict) -> None:
    acc = res.setdefault("accuracy", {})
    seeds = [int(s) for s in args.seeds.split(",")]
    for name in args.datasets.split(","):
        hp = dict(HPARAMS[name], **({"epochs": args.epochs} if args.epochs else {}))
        entry = acc.setdefault(name, {"hparams": hp, "runs": {}})
        if entry["hparams"] != hp:
            raise SystemExit(f"{name}: the results hold runs of other hyper-parameters (--out)")
        runs = entry["runs"]
        g = common.dataset_graph(name)
        for seed in seeds:
            key = f"single/seed{seed}"
            if key not in runs:
                out = WORK / "distributed" / f"{name}-single-{seed}.json"
                runs[key] = common.single(g, hp, seed, out=out)
                print(name, key, runs[key], flush=True)
                save(args, res)
        for parts in map(int, args.parts.split(",")):
            _, store = common.dataset_store(name, parts)
            for engine in args.engines.split(","):
                for seed in seeds:
                    key = f"{engine}/p{parts}/seed{seed}"
                    if key not in runs:
                        runs[key] = engine_run(store, engine, args.nproc, hp, seed)
                        print(name, key, runs[key], flush=True)
                        save(args, res)


def run_speed(args: argparse.Namespace, res: dict) -> None:
    store = common.partitioned_store(common.synth_graph(args.graph), 2, algo="spring")
    setup = {
        "graph": args.graph,
        "synth": common.GRAPHS[args.graph],
        "parts": 2,
        "flags": [*SPEED_FLAGS, "--epochs", str(args.epochs), "--eval-every", str(args.epochs)],
    }
    if res.get("speed_setup", setup) != setup:
        if not args.force:
            raise SystemExit("the results hold speed runs of another setup: --force replaces them")
        res["speed"] = {}
    res["speed_setup"] = setup
    sp = res.setdefault("speed", {})
    for engine in args.engines.split(","):
        for nproc in map(int, args.nprocs.split(",")):
            key = f"{engine}/nproc{nproc}"
            if key in sp and not args.force:
                continue
            out = WORK / "distributed" / f"speed-{args.graph}-{engine}-{nproc}.json"
            flags = ["--store", store, "--engine", engine, "--nproc", nproc, "--no-progress"]
            run = common.train(*flags, *res["speed_setup"]["flags"], out=out)
            sp[key] = {
                "engine": engine,
                "nproc": nproc,
                **common.epoch_summary(run),
                "epoch_seconds": [h["seconds"] for h in run["history"]],
                "batches_per_epoch": run["batches_per_epoch"],
                "loss": [h["loss"] for h in run["history"]],
            }
            print(key, sp[key]["median_epoch_seconds"], flush=True)
            save(args, res)


def save(args: argparse.Namespace, res: dict) -> None:
    cmd = common.command_line("distributed.py")
    if cmd not in res.setdefault("commands", []):
        res["commands"].append(cmd)
    res["machine"] = common.machine_line(threads=1)
    common.write_results(common.out_prefix(args, NAME), res, render)


# ----------------------------------------------------------------------------- report
def _ms(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs) if len(xs) > 1 else 0.0:.3f}"


def _seed(key: str) -> int:
    return int(key.rsplit("/seed", 1)[1])


def _accuracy(acc: dict) -> list[str]:
    found = dict.fromkeys(k.rsplit("/seed", 1)[0] for e in acc.values() for k in e["runs"])
    engines = list(dict.fromkeys(c.split("/")[0] for c in found if c != "single"))
    cols = sorted(set(found) - {"single"}, key=lambda c: (engines.index(c.split("/")[0]), c))
    nseeds = {name: len({_seed(k) for k in e["runs"]}) for name, e in acc.items()}
    L = [
        "## Test accuracy: engines against the single-process trainer",
        "",
        "SPRING partitions, stores built with `--halo-features`; the same hyper-parameters "
        "for every column (below); exact layer-wise evaluation of the best-validation "
        "model; mean ± std over the seeds, and in brackets the difference from the "
        "single-process mean in accuracy points (issue 6 asks for at most 1).",
        "",
    ]

    def table(only: set[int] | None) -> list[str]:
        head = " | ".join(c.replace("/p", " p=") for c in cols)
        rows = [f"| dataset | single process | {head} | seeds |"]
        rows.append("|---" * (len(cols) + 3) + "|")
        for name, e in acc.items():
            runs = {k: v for k, v in e["runs"].items() if only is None or _seed(k) in only}

            def accs(col: str, runs: dict = runs) -> list[float]:
                return [v["test_accuracy"] for k, v in runs.items() if k.startswith(col + "/")]

            ref = accs("single")
            cells = [_ms(ref)]
            for col in cols:
                xs = accs(col)
                delta = f" ({100 * (statistics.mean(xs) - statistics.mean(ref)):+.1f})"
                cells.append(_ms(xs) + (delta if xs and ref else ""))
            n = len({_seed(k) for k in runs})
            rows.append(f"| {name} | " + " | ".join(cells) + f" | {n} |")
        return rows

    L += table(None)
    if max(nseeds.values(), default=0) > 3:
        L += ["", "The same with seeds 0, 1, 2 only (see the notes for why more are run):", ""]
        L += table({0, 1, 2})
    L.append("")
    L += [f"- {name}: `{json.dumps(e['hparams'])}`" for name, e in acc.items()]
    return L + [""]


def _speed(sp: dict, setup: dict) -> list[str]:
    synth = " ".join(common.synth_flags(setup["synth"]))
    L = [
        f"## Epoch time and communication, graph {setup['graph']}",
        "",
        f"Graph: `shoal data synth dcsbm {synth}`; SPRING, {setup['parts']} parts, "
        "`--halo-features`. Each run: `shoal train --store S --engine E --nproc N "
        f"{' '.join(setup['flags'])}`; median epoch after the first (the slowest rank's), "
        "evaluation excluded; split columns are rank 0's seconds per epoch; bytes are summed "
        "over ranks (payload of the all-to-all-v exchanges; all-reduce = gradient or model "
        "payload per rank).",
    ]
    if setup.get("measured_by"):
        L += ["", f"Measured by {setup['measured_by']}."]
    L += [
        "",
        "| engine | nproc | epoch (s) | sampling | gather | fwd/bwd | averaging | "
        "MB sent/epoch | MB all-reduced/epoch | messages/epoch | remote features | "
        "batches/rank |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sp.values():
        ts, c = r["time_split"], r["comm_per_epoch"]
        L.append(
            f"| {r['engine']} | {r['nproc']} | {r['median_epoch_seconds']:.2f} | "
            + " | ".join(
                f"{ts.get(k, 0):.2f}"
                for k in ("sampling", "gather", "forward_backward", "averaging")
            )
            + f" | {c.get('bytes_sent', 0) / 1e6:.1f} | {c.get('allreduce_bytes', 0) / 1e6:.1f} | "
            f"{int(c.get('messages_sent', 0))} | {c.get('remote_feature_fraction', 0):.3f} | "
            f"{r.get('batches_per_epoch')} |"
        )
    L.append("")
    for engine in dict.fromkeys(r["engine"] for r in sp.values()):
        a, b = sp.get(f"{engine}/nproc1"), sp.get(f"{engine}/nproc2")
        if a and b:
            x = a["median_epoch_seconds"] / b["median_epoch_seconds"]
            L.append(f"- speed-up 1 -> 2 processes, {engine}: {x:.2f}x")
    return L + [""]


def _notes(res: dict) -> list[str]:
    """The single-process spread over seeds (why more than 3 seeds) and where minibatch's
    epoch goes, computed from the runs."""
    out = []
    for name, e in res.get("accuracy", {}).items():
        xs = {_seed(k): v["test_accuracy"] for k, v in e["runs"].items() if k.startswith("single/")}
        first, rest = [xs[i] for i in (0, 1, 2) if i in xs], [v for i, v in xs.items() if i > 2]
        if first and rest:
            out.append(
                f"{name}: the single-process test accuracy spreads by "
                f"{statistics.stdev(xs.values()):.3f} (std over {len(xs)} seeds); seeds 0-2 "
                f"average {statistics.mean(first):.3f}, seeds 3-{max(xs)} "
                f"{statistics.mean(rest):.3f}: a 3-seed mean can sit "
                f"{100 * abs(statistics.mean(first) - statistics.mean(rest)):.1f} points from "
                "the rest."
            )
    r = res.get("speed", {}).get("minibatch/nproc2")
    if r:
        ts, c = r["time_split"], r["comm_per_epoch"]
        fb = ts.get("forward_backward", 0) / max(r["median_epoch_seconds"], 1e-9)
        out.append(
            f"minibatch, 2 processes: {100 * c.get('remote_feature_fraction', 0):.1f}% of input "
            f"rows are remote, {c.get('bytes_sent', 0) / 1e6:.0f} MB exchanged per epoch in "
            f"{int(c.get('messages_sent', 0))} messages; forward/backward is {100 * fb:.0f}% "
            "of rank 0's epoch."
        )
    return [f"- {n}" for n in out]


def render(res: dict) -> str:
    L = common.header(
        "Distributed engines: accuracy and speed (issue 6)",
        res,
        "Only gloo on CPU; read times as ratios within one run.",
    )
    if res.get("accuracy"):
        L += _accuracy(res["accuracy"])
    if res.get("speed"):
        L += _speed(res["speed"], res["speed_setup"])
    notes = _notes(res)
    if notes:
        L += ["## Notes (computed from the runs above)", "", *notes, ""]
    if res.get("provenance"):
        L += ["## Provenance", "", *(f"- {k}: {v}" for k, v in res["provenance"].items()), ""]
    return "\n".join(L)


def main() -> None:
    ap = common.bench_args(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]), out=NAME)
    sub = ap.add_subparsers(dest="cmd")
    a = sub.add_parser("accuracy")
    a.add_argument("--datasets", default="cora,amazon_photo,coauthor_physics")
    a.add_argument("--parts", default="2,4")
    a.add_argument("--seeds", default="0,1,2")
    a.add_argument("--nproc", type=int, default=2)
    a.add_argument("--engines", default="minibatch,averaging")
    a.add_argument("--epochs", type=int, default=None, help="instead of HPARAMS' epochs")
    s = sub.add_parser("speed")
    s.add_argument("--graph", default="200k", choices=sorted(common.GRAPHS))
    s.add_argument("--epochs", type=int, default=3)
    s.add_argument("--engines", default="minibatch,averaging")
    s.add_argument("--nprocs", default="1,2")
    s.add_argument("--force", action="store_true", help="rerun (replace) the runs in the JSON")
    sub.add_parser("report")
    args = ap.parse_args()
    prefix = common.out_prefix(args, NAME)
    if args.cmd == "report":
        res = common.load_json(prefix.with_suffix(".json"))
        common.write_results(prefix, res, render)
        return
    parts = list(SMOKE) if args.smoke and not args.cmd else [args.cmd]
    if parts == [None]:
        ap.error("give a part (accuracy, speed, report) or --smoke")
    res = {} if args.smoke else common.load_json(prefix.with_suffix(".json"))
    for part in parts:
        pargs = args
        if args.smoke and not args.cmd:
            pargs = ap.parse_args(["--smoke", part, *SMOKE[part].split()])
        (run_accuracy if part == "accuracy" else run_speed)(pargs, res)
    save(args, res)


if __name__ == "__main__":
    main()
