"""``fullgraph`` engine benchmark (issue 13): DepCache, DepComm and Hybrid, epoch time and bytes.

Parts (2 processes of 1 thread each under torch.distributed.run, stores of bench/distributed.py:
SPRING, 2 parts):

``modes``: Cora (average degree 3.9), Coauthor-Physics (14.4) and Amazon-Photo (31.1), GCN at
hidden sizes 64, 256 and 640, ``--deps cache|comm|hybrid``: median epoch time of ``--epochs``
training epochs (after one warm-up epoch), its split (cached compute, local compute,
communication, backward, all-reduce), bytes per epoch, the hybrid split and its probed costs.

``sweep``: one graph and hidden size, the probed ``T_c`` scaled by factors from 0 (cache
nothing beyond the features) to 1e6 (cache everything): cached fraction of the layer-2
dependencies against epoch time (the paper's Figure 11).

``ablate``: Hybrid with the ring order off (4 processes: with 2 the orders coincide) and with
the overlap off (2 processes), each against Hybrid with both on, back to back.

Usage::

    python bench/fullgraph.py modes [--datasets ...] [--hidden 64,256,640] [--epochs 5]
    python bench/fullgraph.py sweep [--dataset amazon_photo] [--hidden 256]
    python bench/fullgraph.py ablate [--dataset amazon_photo] [--hidden 256]
    python bench/fullgraph.py report

Results: bench/results/fullgraph.json and bench/results/fullgraph.md (network: loopback unless
a row says otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import distributed as dbench  # noqa: E402  (bench/distributed.py: data preparation, helpers)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PY = sys.executable
DATASETS = ("cora", "coauthor_physics", "amazon_photo")
SWEEP = (0.0, 0.1, 0.3, 1.0, 3.0, 10.0, 1e6)


def load() -> dict:
    p = RESULTS / "fullgraph.json"
    return json.loads(p.read_text()) if p.exists() else {}


def save(res: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS / "fullgraph.json.tmp"
    tmp.write_text(json.dumps(res, indent=1))
    os.replace(tmp, RESULTS / "fullgraph.json")
    write_markdown(res)


def worker(args: argparse.Namespace) -> None:
    """One rank (started by torch.distributed.run): build the engine, time the epochs."""
    from shoal.distributed import DistConfig, process_group
    from shoal.engines import EngineConfig, get_engine
    from shoal.store import Store
    from shoal.training import TrainConfig
    from shoal.utils.threads import set_threads

    set_threads(1)
    extra = json.loads(args.extra)
    tc = TrainConfig(model="gcn", fanouts=(-1, -1), hidden=args.hidden, epochs=args.epochs,
                     lr=0.01, dropout=0.5, seed=0, progress=False, threads=1, **extra)  # fmt: skip
    with process_group(DistConfig(threads=1)) as ctx:
        t0 = time.perf_counter()
        eng = get_engine("fullgraph")(Store.open(args.store), EngineConfig(train=tc), ctx)
        setup = time.perf_counter() - t0
        recs = [eng.train_epoch(e) for e in range(args.epochs + 1)][1:]  # one warm-up epoch
        if ctx.is_rank0:
            secs = [r["seconds"] for r in recs]
            med = sorted(range(len(secs)), key=secs.__getitem__)[len(secs) // 2]
            halo = max(len(eng.graph.halo), 1)
            Path(args.out).write_text(json.dumps({
                "setup_seconds": setup,
                "epoch_seconds": secs,
                "median_epoch_seconds": statistics.median(secs),
                "time_split_rank0": recs[med]["time_split"],
                "bytes_per_epoch": recs[med]["comm"]["bytes_sent"],
                "settings": eng.settings(),
                "cached_fraction_layer2_rank0": len(eng.sets.cached[-1]) / halo,
            }))  # fmt: skip


def run(store: Path, hidden: int, epochs: int, extra: dict, nproc: int = 2) -> dict:
    out = dbench.DWORK / "fullgraph-run.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    dbench.sh([PY, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               str(Path(__file__).resolve()), "worker", "--store", str(store), "--hidden",
               str(hidden), "--epochs", str(epochs), "--extra", json.dumps(extra), "--out",
               str(out)], env=env)  # fmt: skip
    return json.loads(out.read_text())


def command(res: dict, part: str) -> None:
    res.setdefault("commands", {})[part] = " ".join(["python bench/fullgraph.py", *sys.argv[1:]])
    res["machine"] = dbench.machine()


def run_modes(args: argparse.Namespace) -> None:
    res = load()
    command(res, "modes")
    m = res.setdefault("modes", {})
    for name in args.datasets.split(","):
        _, store = dbench.prepare(name, 2)
        for hidden in (int(h) for h in args.hidden.split(",")):
            for deps in ("cache", "comm", "hybrid"):  # back to back per graph and width
                key = f"{name}/h{hidden}/{deps}"
                m[key] = {"load_before": os.getloadavg()[0],
                          **run(store, hidden, args.epochs, {"deps": deps})}  # fmt: skip
                print(key, round(m[key]["median_epoch_seconds"], 3), flush=True)
                save(res)


def run_sweep(args: argparse.Namespace) -> None:
    res = load()
    command(res, "sweep")
    _, store = dbench.prepare(args.dataset, 2)
    probe = run(store, args.hidden, 1, {"deps": "hybrid"})["settings"]["dep_costs_probed"]
    sw = res["sweep"] = {"dataset": args.dataset, "hidden": args.hidden, "probed": probe,
                         "runs": {}}  # fmt: skip
    for f in SWEEP:
        costs = [probe[0], probe[1], probe[2] * f]
        r = run(store, args.hidden, args.epochs, {"deps": "hybrid", "dep_costs": costs})
        sw["runs"][str(f)] = r
        print(f, r["cached_fraction_layer2_rank0"], r["median_epoch_seconds"], flush=True)
        save(res)


def run_ablate(args: argparse.Namespace) -> None:
    res = load()
    command(res, "ablate")
    _, store = dbench.prepare(args.dataset, 2)
    _, store4 = dbench.prepare(args.dataset, 4)
    ab = res["ablate"] = {"dataset": args.dataset, "hidden": args.hidden}
    for key, st, n, extra in (("both, 4 procs", store4, 4, {}),
                              ("no ring, 4 procs", store4, 4, {"ring": False}),
                              ("both, 2 procs", store, 2, {}),
                              ("no overlap, 2 procs", store, 2, {"overlap": False})):  # fmt: skip
        ab[key] = run(st, args.hidden, args.epochs, {"deps": "hybrid", **extra}, nproc=n)
        print(key, ab[key]["median_epoch_seconds"], flush=True)
        save(res)


def write_markdown(res: dict) -> None:
    lines = ["# fullgraph engine (NeutronStar): DepCache, DepComm, Hybrid", "",
             f"Machine: {res.get('machine', '?')}. Network: loopback (gloo over TCP on one "
             "machine) for every row. Written by `bench/fullgraph.py`.", ""]  # fmt: skip
    if "modes" in res:
        lines += ["## Epoch time per mode (2 processes, GCN 2 layers)", "",
                  "| graph | hidden | deps | median epoch s | cached | local | comm | backward "
                  "| all-reduce | MB/epoch | cached per layer (rank 0) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for key, r in res["modes"].items():
            name, h, deps = key.split("/")
            ts = r["time_split_rank0"]
            lines.append(
                f"| {name} | {h[1:]} | {deps} | {r['median_epoch_seconds']:.3f} | "
                + " | ".join(
                    f"{ts.get(k, 0.0):.3f}"
                    for k in (
                        "cached_compute",
                        "local_compute",
                        "communication",
                        "backward",
                        "allreduce",
                    )
                )  # fmt: skip
                + f" | {r['bytes_per_epoch'] / 1e6:.2f} | "
                f"{r['settings']['cached_per_layer_rank0']} |"
            )
        lines.append("")
    if "sweep" in res:
        sw = res["sweep"]
        lines += [f"## Cached fraction sweep ({sw['dataset']}, hidden {sw['hidden']})", "",
                  "| T_c factor | cached fraction (layer 2, rank 0) | median epoch s |",
                  "|---|---|---|"]  # fmt: skip
        for f, r in sw["runs"].items():
            lines.append(f"| {f} | {r['cached_fraction_layer2_rank0']:.2f} | "
                         f"{r['median_epoch_seconds']:.3f} |")  # fmt: skip
        lines.append("")
    if "ablate" in res:
        lines += ["## Ring order and overlap, each off alone", "", "| run | median epoch s |",
                  "|---|---|"]  # fmt: skip
        lines += [f"| {k} | {v['median_epoch_seconds']:.3f} |" for k, v in res["ablate"].items()
                  if isinstance(v, dict)]  # fmt: skip
        lines.append("")
    lines += ["## Commands", ""] + [f"- {k}: `{v}`" for k, v in res.get("commands", {}).items()]
    tmp = RESULTS / "fullgraph.md.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, RESULTS / "fullgraph.md")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("modes")
    m.add_argument("--datasets", default=",".join(DATASETS))
    m.add_argument("--hidden", default="64,256,640")
    m.add_argument("--epochs", type=int, default=5)
    for name in ("sweep", "ablate"):
        s = sub.add_parser(name)
        s.add_argument("--dataset", default="amazon_photo")
        s.add_argument("--hidden", type=int, default=256)
        s.add_argument("--epochs", type=int, default=5)
    w = sub.add_parser("worker")
    for a in ("--store", "--extra", "--out"):
        w.add_argument(a, required=True)
    w.add_argument("--hidden", type=int, required=True)
    w.add_argument("--epochs", type=int, default=5)
    sub.add_parser("report")
    args = ap.parse_args()
    dbench.DWORK.mkdir(parents=True, exist_ok=True)
    {"modes": run_modes, "sweep": run_sweep, "ablate": run_ablate, "worker": worker,
     "report": lambda _: write_markdown(load())}[args.cmd](args)  # fmt: skip


if __name__ == "__main__":
    main()
