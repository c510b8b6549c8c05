"""The automatic plan (issue 17): does ``--engine auto`` pick an engine within 15% of the
fastest one measured by hand?

For each store (2 SPRING parts with halo features, 2 processes of 1 thread on this machine:
the shared datasets by name, e.g. small and dense Amazon-Photo and wide-featured
Coauthor-Physics, and ``synth-<G>`` for the synthetic graph ``common.GRAPHS[G]``, e.g. the
larger and sparser ``synth-200k``), back to back:

1. ``shoal plan --store S --workers 2 --json -``: the probed costs, each engine's estimated
   training epoch and the choice;
2. every engine of ``--engines`` by hand, ``--epochs E``: the mean training epoch after the
   first (exact evaluation excluded; it runs once, after the last epoch);
3. ``shoal train --engine auto``: the engine it chose (probing inside the run, between its
   ranks) and its own epoch time.

The model is the default one (``shoal train``'s with no model flags; the results name it).
Target: the measured epoch of the chosen engine is at most 1.15x the fastest.

Usage::

    python bench/plan.py run [--stores amazon_photo,synth-200k,coauthor_physics] [--epochs 6]
                             [--small-epochs 21] [--engines minibatch,...] [--fresh]
    python bench/plan.py report
    python bench/plan.py --smoke    # on the smoke graph's store: the plan and auto only

Results: bench/results/plan.json and bench/results/plan.md (resumable: measurements already
in the JSON are kept; ``--fresh`` starts over).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import common

NAME = "bench/results/plan"
STORES = ("amazon_photo", "coauthor_physics", "synth-200k")
ENGINES = ("minibatch", "averaging", "hec", "disagg", "fullgraph")
TARGET = 1.15
#: stores with one batch per epoch (epochs of ~0.2 s): more epochs for a stable mean
SMALL = ("amazon_photo",)
ENV = {"OMP_NUM_THREADS": "1"}
SMOKE = "run --stores synth-smoke --epochs 2 --engines="  # the plan and auto: 2 launches


def store_of(name: str) -> Path:
    if name.startswith("synth-"):
        return common.partitioned_store(common.synth_graph(name[6:]), 2, algo="spring")
    return common.dataset_store(name, 2)[1]


def train(store: Path, engine: str, epochs: int) -> dict:
    out = common.WORK / "plan" / f"{store.name}-{engine}.json"
    flags = ["--store", store, "--engine", engine, "--nproc", 2, "--epochs", epochs]
    d = common.train(*flags, "--eval-every", epochs, "--no-progress", out=out, env=ENV)
    secs = [h["seconds"] for h in d["history"]][1:]  # the first epoch warms up
    r = {"engine": d["engine"], "epoch_s": statistics.mean(secs), "epochs_s": secs}
    if "auto_plan" in d:
        r["auto_plan"] = d["auto_plan"]
    m, s = d["config"]["model"], d["config"]["sampling"]
    r["model"] = f"{m['name']}, hidden {m['hidden']}, fanouts "
    r["model"] += f"{','.join(map(str, s['fanouts']))}, batch {s['batch_size']}"
    return r


def run(args: argparse.Namespace, res: dict) -> None:
    res["epochs"] = args.epochs
    engines = [e for e in args.engines.split(",") if e]
    for name in args.stores.split(","):
        store = store_of(name)
        e = res.setdefault("stores", {}).setdefault(name, {"measured": {}})
        epochs = e.setdefault("epochs", args.small_epochs if name in SMALL else args.epochs)
        meta = json.loads((store / "meta.json").read_text())
        e["shape"] = {
            "nodes": meta["num_nodes"],
            "edges": meta["num_edges"],
            "feature_dim": meta["feature_dim"],
            "parts": meta["num_parts"],
            "train": sum(p["train"] for p in meta["parts"]),
        }
        if "plan" not in e:
            plan = ["plan", "--store", store, "--workers", 2, "--memory-per-worker", "8GB"]
            p = common.sh([*common.SHOAL, *plan, "--json", "-"], env={**os.environ, **ENV})
            e["plan"] = json.loads(p.stdout)["engine"]
            save(args, res)
        for engine in engines:
            if engine in e["measured"] or engine in e["plan"]["excluded"]:
                continue
            e["measured"][engine] = train(store, engine, epochs)
            print(name, engine, round(e["measured"][engine]["epoch_s"], 3), flush=True)
            save(args, res)
        if "auto" not in e:
            e["auto"] = train(store, "auto", epochs)
            print(name, "auto ->", e["auto"]["engine"], flush=True)
            save(args, res)


def save(args: argparse.Namespace, res: dict) -> None:
    res.update(command=common.command_line("plan.py"), machine=common.machine_line(threads=1))
    common.write_results(common.out_prefix(args, NAME), res, render)


def _row(name: str, e: dict) -> tuple[list[str], bool | None]:
    m = {k: statistics.mean(v["epochs_s"]) for k, v in e.get("measured", {}).items()}
    est = e["plan"]["estimates"]
    auto = e.get("auto", {}).get("engine")
    cells = " / ".join(
        f"{k} {m[k]:.3g} (est. {est[k]['epoch_s']:.3g})" for k in sorted(m, key=m.get)
    )
    best = min(m, key=m.get) if m else "-"
    ratio = m[auto] / m[best] if auto in m else None
    ok = None if ratio is None else ratio <= TARGET
    return [
        name,
        cells or "-",
        best,
        e["plan"]["engine"],
        auto or "-",
        f"{statistics.mean(e['auto']['epochs_s']):.3g}" if auto else "-",
        "-" if ratio is None else f"{ratio:.2f}",
        {True: "yes", False: "no"}.get(ok, "-"),
    ], ok


def render(res: dict) -> str:
    stores = res.get("stores", {})
    runs = [r for e in stores.values() for r in [*e["measured"].values(), e.get("auto")] if r]
    models = "; ".join(sorted({r["model"] for r in runs}))
    lines = common.header(
        "The automatic plan: `--engine auto` against every engine measured by hand",
        res,
        "2 processes of 1 thread, 2 parts; network: loopback. Model: `shoal train`'s default "
        f"({models}); {res.get('epochs', '?')} epochs (the store's own count where the row says), "
        "the mean training epoch after the first (seconds, evaluation excluded: the training "
        "time an epoch adds). *est.*: `shoal plan`'s estimate from the probed costs; *plan*: "
        "its choice; *auto*: the engine `shoal train --engine auto` chose (probing inside the "
        "run) and its own epoch; *ratio*: the hand-measured epoch of auto's choice over the "
        f"fastest (target <= {TARGET}).",
    )
    lines += [
        "| store | measured epoch s, fastest first (estimate) | fastest | plan | auto | "
        "auto's epoch s | ratio | within 15% |",
        "|---|---|---|---|---|---|---|---|",
    ]
    oks = []
    for name, e in stores.items():
        row, ok = _row(name, e)
        oks.append(ok)
        s = e["shape"]
        row[0] = (
            f"{name} ({s['nodes']} nodes, {s['edges']} edges, {s['feature_dim']}-d, "
            f"{s['train']} training; {e.get('epochs', res.get('epochs'))} epochs)"
        )
        lines.append("| " + " | ".join(row) + " |")
    done = [o for o in oks if o is not None]
    lines.append("")
    if done:
        lines += [f"Target met on {sum(done)} of {len(done)} stores.", ""]
    for name, e in stores.items():
        c = e["plan"].get("costs", {})
        if c:
            lines.append(
                f"- {name}, probed (`shoal plan`): one batch samples "
                f"{c['batch_edges']:.0f} edges in {c['sample_s'] * 1e3:.2g} ms, reads "
                f"{c['batch_rows']:.0f} rows in {c['gather_s'] * 1e3:.2g} ms, computes "
                f"in {c['compute_s'] * 1e3:.3g} ms; halo share of its rows "
                f"{c['halo_fraction']:.2f}; layers on {c['layer_nodes']} nodes "
                f"{', '.join(f'{t * 1e3:.3g}' for t in c['layer_s'])} ms; network "
                f"{c['net_bytes_per_s'] / 1e9:.2f} GB/s, round trip "
                f"{c['net_latency_s'] * 1e6:.0f} us ({c['network']}); probing took "
                f"{c['seconds']:.1f} s"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    common.bench_args(ap, out=NAME)
    sub = ap.add_subparsers(dest="cmd")
    r = sub.add_parser("run")
    r.add_argument("--stores", default=",".join(STORES))
    r.add_argument("--epochs", type=int, default=6)
    r.add_argument("--small-epochs", type=int, default=21, help=f"epochs on {', '.join(SMALL)}")
    r.add_argument("--engines", default=",".join(ENGINES), help="engines measured by hand")
    r.add_argument("--fresh", action="store_true")
    sub.add_parser("report")
    args = ap.parse_args()
    if args.smoke and not args.cmd:
        args = ap.parse_args(["--smoke", *SMOKE.split()])
    prefix = common.out_prefix(args, NAME)
    if args.cmd == "report":
        common.write_results(prefix, common.load_json(prefix.with_suffix(".json")), render)
    elif args.cmd == "run":
        run(args, {} if args.fresh or args.smoke else common.load_json(prefix.with_suffix(".json")))
    else:
        ap.error("give run, report or --smoke")


if __name__ == "__main__":
    main()
