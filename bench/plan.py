"""The automatic plan (issue 17): does ``--engine auto`` pick an engine within 15% of the
fastest one measured by hand?

For each store (2 parts, 2 processes of 1 thread on this machine, the stores of
bench/distributed.py: small and dense Amazon-Photo, wide-featured Coauthor-Physics, the
larger and sparser synthetic 200k-node graph), back to back:

1. ``shoal plan --store S --workers 2 --json -``: the probed costs, each engine's estimated
   training epoch and the choice;
2. every engine by hand, ``--epochs E``: the mean training epoch after the first (exact
   evaluation excluded; it runs once, after the last epoch);
3. ``shoal train --engine auto``: the engine it chose (probing inside the run, between its
   ranks) and its own epoch time.

The model is the default one (``sage``, the paper preset: 2 layers sampled 25,10, hidden 256,
batch 1024). Target: the measured epoch of the chosen engine is at most 1.15x the fastest.

Usage::

    python bench/plan.py run [--stores amazon_photo,synth-200k,coauthor_physics] [--epochs 6]
                             [--small-epochs 21] [--fresh]
    python bench/plan.py report

Results: bench/results/plan.json and bench/results/plan.md (resumable: measurements already
in the JSON are kept; ``--fresh`` starts over).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path

import common
import distributed as dbench  # bench/distributed.py: stores
from common import (
    RESULTS,
    SHOAL,
    command_line,
    load_json,
    machine_line,
    sh,
    write_json,
    write_text_atomic,
)

WORK = common.WORK / "plan"
STORES = ("amazon_photo", "coauthor_physics", "synth-200k")
ENGINES = ("minibatch", "averaging", "hec", "disagg", "fullgraph")
TARGET = 1.15
#: stores with one batch per epoch (epochs of ~0.2 s): more epochs for a stable mean
SMALL = ("amazon_photo",)


def load() -> dict:
    return load_json(RESULTS / "plan.json")


def save(res: dict) -> None:
    write_json(RESULTS / "plan.json", res, indent=2)
    write_markdown(res)


def store_of(name: str) -> Path:
    if name == "synth-200k":
        s = dbench.DWORK / "synth-200k-store2"
        if not (s / "meta.json").exists():
            raise SystemExit(
                f"{s} is missing: run `python bench/distributed.py speed` first (it builds it)"
            )
        return s
    return dbench.prepare(name, 2)[1]


def shoal(*args: str) -> subprocess.CompletedProcess:
    return sh([*SHOAL, *args], env={**os.environ, "OMP_NUM_THREADS": "1"})


def train(store: Path, engine: str, epochs: int) -> dict:
    WORK.mkdir(parents=True, exist_ok=True)
    out = WORK / f"{store.name}-{engine}.json"
    p = shoal(
        "train",
        "--store",
        str(store),
        "--engine",
        engine,
        "--nproc",
        "2",
        "--epochs",
        str(epochs),
        "--eval-every",
        str(epochs),
        "--no-progress",
        "--json",
        str(out),
    )
    d = json.loads(out.read_text())
    secs = [h["seconds"] for h in d["history"]][1:]  # the first epoch warms up
    r = {"engine": d["engine"], "epoch_s": statistics.mean(secs), "epochs_s": secs}
    if "auto_plan" in d:
        r["auto_plan"] = d["auto_plan"]
        r["stderr"] = [ln for ln in p.stderr.splitlines() if "s per epoch" in ln]
    return r


def run(args: argparse.Namespace) -> None:
    res = {} if args.fresh else load()
    res["command"] = command_line("plan.py")
    res["machine"] = machine_line()
    res["epochs"] = args.epochs
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
            p = shoal(
                "plan",
                "--store",
                str(store),
                "--workers",
                "2",
                "--memory-per-worker",
                "8GB",
                "--json",
                "-",
            )
            e["plan"] = json.loads(p.stdout)["engine"]
            save(res)
        for engine in ENGINES:
            if engine in e["measured"] or engine in e["plan"]["excluded"]:
                continue
            e["measured"][engine] = train(store, engine, epochs)
            print(name, engine, round(e["measured"][engine]["epoch_s"], 3), flush=True)
            save(res)
        if "auto" not in e:
            e["auto"] = train(store, "auto", epochs)
            print(name, "auto ->", e["auto"]["engine"], flush=True)
            save(res)


def _row(name: str, e: dict) -> tuple[list[str], bool | None]:
    m = {k: statistics.mean(v["epochs_s"]) for k, v in e.get("measured", {}).items()}
    if not m:
        return [name] + ["-"] * 7, None
    best = min(m, key=m.get)
    est = e["plan"]["estimates"]
    auto = e.get("auto", {}).get("engine")
    ratio = m[auto] / m[best] if auto in m else float("nan")
    ok = ratio <= TARGET if auto in m else None
    cells = " / ".join(
        f"{k} {m[k]:.3g} (est. {est[k]['epoch_s']:.3g})" for k in sorted(m, key=m.get)
    )
    return [
        name,
        cells,
        best,
        e["plan"]["engine"],
        auto or "-",
        f"{statistics.mean(e['auto']['epochs_s']):.3g}" if auto else "-",
        f"{ratio:.2f}" if auto in m else "-",
        {True: "yes", False: "no"}.get(ok, "-"),
    ], ok


def write_markdown(res: dict) -> None:
    lines = [
        "# The automatic plan: `--engine auto` against every engine measured by hand",
        "",
        f"Command: `{res.get('command', 'python bench/plan.py run')}`  ",
        f"Machine: {res.get('machine', '?')}; 2 processes of 1 thread, 2 parts; network: loopback",
        "",
        "Model: the defaults (`sage`, paper preset: 2 layers sampled 25,10, hidden 256, "
        f"batch 1024); {res.get('epochs', '?')} epochs (the store's own count where the "
        "row says), the mean training epoch after "
        "the first (seconds, evaluation excluded: the training time an epoch adds; single "
        "epochs vary by up to 2x, e.g. averaging on synth-200k alternates 1.2 and 2.5 s). *est.*: `shoal plan`'s estimate from "
        "the probed costs; *plan*: its choice; *auto*: the engine `shoal train --engine "
        "auto` chose (probing inside the run) and its own epoch; *ratio*: the hand-measured "
        f"epoch of auto's choice over the fastest (target <= {TARGET}).",
        "",
        "| store | measured epoch s, fastest first (estimate) | fastest | plan | auto | "
        "auto's epoch s | ratio | within 15% |",
        "|---|---|---|---|---|---|---|---|",
    ]
    oks = []
    for name, e in res.get("stores", {}).items():
        row, ok = _row(name, e)
        oks.append(ok)
        s = e.get("shape", {})
        row[0] = (
            f"{name} ({s.get('nodes')} nodes, {s.get('edges')} edges, "
            f"{s.get('feature_dim')}-d, {s.get('train')} training; "
            f"{e.get('epochs', res.get('epochs'))} epochs)"
        )
        lines.append("| " + " | ".join(row) + " |")
    done = [o for o in oks if o is not None]
    lines += ["", f"Target met on {sum(done)} of {len(done)} stores." if done else "", ""]
    for name, e in res.get("stores", {}).items():
        c = e.get("plan", {}).get("costs", {})
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
    write_text_atomic(RESULTS / "plan.md", "\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--stores", default=",".join(STORES))
    r.add_argument("--epochs", type=int, default=6)
    r.add_argument("--small-epochs", type=int, default=21, help=f"epochs on {', '.join(SMALL)}")
    r.add_argument("--fresh", action="store_true")
    sub.add_parser("report")
    args = ap.parse_args()
    if args.cmd == "run":
        run(args)
    else:
        write_markdown(load())


if __name__ == "__main__":
    main()
