"""Training speed: shoal's single-process trainer against DGL 2.1.0, side by side.

Workload (issue 5): :func:`common.synth_graph` ``("200k")`` (DC-SBM, 200k nodes, 1M undirected
edges stored in both directions, 128-d features, 47 classes, 10% training nodes);
GraphSAGE-mean, 3 layers, hidden 256, dropout 0.5, Adam lr 0.003, batch 1024, fanouts 15 at
hop 1 (the seeds), 10 at hop 2, 5 at hop 3 (DGL lists fanouts input layer first, so it gets
``[5, 10, 15]``: the same sampling). shoal's side is ``shoal train --json`` (its history has
every epoch's seconds and time split); DGL's side is :func:`run_dgl` in the venv of
``bench/dgl_env.sh`` (torch 2.2.1), the same loop by hand. Both run with the same thread count,
one after the other, so a loaded machine slows both alike; the figure of merit is the ratio of
median epoch times (the first epoch of each left out: numba's compilation, warm-up).

Usage::

    python bench/train.py [--threads 1] [--epochs 3] [--skip-dgl]
    python bench/train.py --report-only     # re-render the .md from the .json

With ``--smoke`` the DGL side is skipped (and said so) when its venv is absent. The profile of a
training step: ``bench/train_profile.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

import common

FANOUTS = (15, 10, 5)
DGL_PY = common.BENCH / "work" / "dgl-venv" / "bin" / "python"
PHASES = ("sampling", "gather", "forward_backward")


def run_dgl(graph: Path, epochs: int, threads: int, batch_size: int, hidden: int) -> dict:
    """The DGL side, run in DGL's venv (no shoal import): the graph's edge file and arrays
    loaded into a ``DGLGraph``, then the training loop timed by phase."""
    import dgl
    import numpy as np
    import torch
    import torch.nn.functional as F
    from dgl.nn import SAGEConv

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    meta = json.loads((graph / "meta.json").read_text())
    e = np.fromfile(graph / "edges.bin", dtype=meta["edge_dtype"]).reshape(-1, 2).astype(np.int64)
    g = dgl.graph(
        (torch.from_numpy(e[:, 0]), torch.from_numpy(e[:, 1])), num_nodes=meta["num_nodes"]
    )
    feat = torch.from_numpy(np.load(graph / "features.npy").astype(np.float32))
    labels = torch.from_numpy(np.load(graph / "labels.npy").astype(np.int64))
    train = torch.from_numpy(np.load(graph / "train_idx.npy").astype(np.int64))
    d = [feat.shape[1], hidden, hidden, int(labels.max()) + 1]
    layers = torch.nn.ModuleList(SAGEConv(d[i], d[i + 1], "mean") for i in range(3))
    opt = torch.optim.Adam(layers.parameters(), lr=0.003)
    sampler = dgl.dataloading.NeighborSampler(list(reversed(FANOUTS)))
    gen = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(epochs):
        t = dict.fromkeys(PHASES, 0.0)
        t_epoch = time.perf_counter()
        perm = train[torch.randperm(len(train), generator=gen)]
        for start in range(0, len(perm), batch_size):
            t0 = time.perf_counter()
            input_nodes, output_nodes, blocks = sampler.sample_blocks(
                g, perm[start : start + batch_size]
            )
            t1 = time.perf_counter()
            h, y = feat[input_nodes], labels[output_nodes]
            t2 = time.perf_counter()
            opt.zero_grad()
            for i, (layer, block) in enumerate(zip(layers, blocks, strict=True)):
                h = layer(block, F.dropout(h, 0.5, True))
                h = F.relu(h) if i < 2 else h
            loss = F.cross_entropy(h, y)
            loss.backward()
            opt.step()
            t3 = time.perf_counter()
            for k, dt in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                t[k] += dt
        rows.append(
            {"seconds": time.perf_counter() - t_epoch, "time_split": t, "loss": float(loss)}
        )
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "history": rows,
        "peak_rss_bytes": rss,
        "dgl": dgl.__version__,
        "torch": torch.__version__,
    }


def summary(run: dict) -> dict:
    """Median epoch (the first left out when there are others) and its split, peak RSS."""
    s = common.epoch_summary(run)
    return {
        "epoch_seconds": s["median_epoch_seconds"],
        **{k: s["time_split"].get(k, 0.0) for k in PHASES},
        "peak_rss_mib": run["peak_rss_bytes"] / 2**20,
    }


def measure(args: argparse.Namespace) -> dict:
    graph = common.synth_graph("smoke" if args.smoke else "200k")
    meta = json.loads((graph / "meta.json").read_text())
    res = common.new_results(
        "train.py",
        threads=args.threads,
        workload={
            "graph": common.rel(graph),
            "nodes": meta["num_nodes"],
            "stored_edges": meta["num_edges"],
            "features": meta["feature_dim"],
            "classes": meta["num_classes"],
            "model": "GraphSAGE-mean, 3 layers",
            "hidden": args.hidden,
            "fanouts_hop1_first": list(FANOUTS),
            "batch_size": args.batch_size,
            "threads": args.threads,
            "epochs": args.epochs,
        },
    )
    env = {"OMP_NUM_THREADS": str(args.threads), "NUMBA_NUM_THREADS": str(args.threads)}
    hp = ["--model", "sage", f"--fanouts={','.join(map(str, FANOUTS))}", "--hidden", args.hidden]
    hp += ["--batch-size", args.batch_size, "--lr", 0.003, "--dropout", 0.5, "--seed", 0]
    hp += ["--epochs", args.epochs, "--eval-every", args.epochs, "--threads", args.threads]
    out = common.WORK / "train" / "shoal.json"
    res["shoal"] = common.train("--graph", graph, *hp, "--no-progress", out=out, env=env)
    res["median"] = {"shoal": summary(res["shoal"])}
    if args.skip_dgl or (args.smoke and not DGL_PY.exists()):
        why = (
            "--skip-dgl"
            if args.skip_dgl
            else f"{common.rel(DGL_PY)} absent; `bash bench/dgl_env.sh` makes it"
        )
        res["dgl"] = {"skipped": why}
        return res
    py = subprocess.run(
        ["bash", common.BENCH / "dgl_env.sh"], check=True, capture_output=True, text=True
    ).stdout.strip()
    cmd = [
        py,
        __file__,
        "--dgl-worker",
        graph,
        args.epochs,
        args.threads,
        args.batch_size,
        args.hidden,
    ]
    p = common.sh(cmd, env={**os.environ, **env})
    res["dgl"] = json.loads(p.stdout.strip().splitlines()[-1])
    res["median"]["dgl"] = summary(res["dgl"])
    res["median"]["ratio_shoal_over_dgl"] = (
        res["median"]["shoal"]["epoch_seconds"] / res["median"]["dgl"]["epoch_seconds"]
    )
    return res


def render(res: dict) -> str:
    w, m, dgl = res["workload"], res["median"], res.get("dgl", {})
    side = (
        f"DGL side: skipped ({dgl['skipped']})."
        if "skipped" in dgl
        else f"DGL side: DGL {dgl.get('dgl', '-')}, torch {dgl.get('torch', '-')} (venv of "
        "`bench/dgl_env.sh`); shoal side: `shoal train --json` in the repository's venv."
    )
    paras = [
        side,
        f"Workload: `{w['graph']}` ({w['nodes']:,} nodes, {w['stored_edges']:,} stored edges, "
        f"{w['features']}-d features, {w['classes']} classes), {w['model']}, hidden "
        f"{w['hidden']}, dropout 0.5 on every layer's input, Adam, batch {w['batch_size']}, "
        f"fanouts {w['fanouts_hop1_first']} (hop 1 first; DGL gets the reversed list, its "
        f"input-layer-first order), {w['threads']} thread(s) for torch and numba, "
        f"{w['epochs']} epochs each, run back to back; medians over "
        + ("every epoch." if res.get("commit") else "the epochs after the first."),
    ]
    if res.get("commit"):  # numbers of an earlier version of this script
        paras.append(
            f"Measured by `bench/train.py` as of commit {res['commit']} (shoal's side: the "
            "trainer called in-process, numba warmed up before the timed epochs); rendered by "
            "`python bench/train.py --report-only`."
        )
    lines = common.header("Training speed: shoal vs DGL 2.1.0 (single process)", res, *paras)
    lines += [
        "| system | epoch (s) | sampling (s) | gather (s) | forward/backward (s) | "
        "peak RSS (MiB) |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("shoal", "dgl"):
        if name in m:
            s = m[name]
            lines.append(
                f"| {name} | {s['epoch_seconds']:.2f} | {s['sampling']:.2f} | {s['gather']:.2f} "
                f"| {s['forward_backward']:.2f} | {s['peak_rss_mib']:.0f} |"
            )
    if "ratio_shoal_over_dgl" in m:
        lines += ["", f"Ratio shoal/DGL (median epoch time): {m['ratio_shoal_over_dgl']:.3f}."]
    lines += [
        "",
        "Sampling = neighbour sampling to blocks; gather = feature rows (+ labels) of the "
        "batch's nodes; forward/backward = forward, loss, backward and the optimizer step. "
        "Where a step's time goes: [train_profile.md](train_profile.md).",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--skip-dgl", action="store_true")
    ap.add_argument("--report-only", action="store_true", help="re-render the .md from the .json")
    ap.add_argument("--dgl-worker", nargs=5, help=argparse.SUPPRESS)
    common.bench_args(ap, out="bench/results/train")
    args = ap.parse_args()
    if args.dgl_worker:  # in DGL's venv
        g, *n = args.dgl_worker
        print(json.dumps(run_dgl(Path(g), *map(int, n))))
        return 0
    prefix = common.out_prefix(args, "bench/results/train")
    if args.report_only:
        res = common.load_json(prefix.with_suffix(".json"))
        common.write_text_atomic(prefix.with_suffix(".md"), render(res))
        return 0
    if args.smoke:
        args.epochs = 2
    common.write_results(prefix, measure(args), render)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
