"""Training speed: shoal's single-process trainer against DGL 2.1.0, side by side, per shape.

Issue 55's shapes (``SHAPES``), each GraphSAGE/GAT/GCN trained by both systems back to back
with the same graph, model, sampling, batch, dropout 0.5 and Adam:

- **a** (issue 5's workload): :func:`common.synth_graph` ``("200k")`` (DC-SBM, 200k nodes,
  1M undirected edges stored in both directions, 128-d features, 47 classes, 10% training
  nodes); GraphSAGE-mean, 3 layers, hidden 256, fanouts 15,10,5 (hop 1 first), 1 thread;
- **b** (the shape a new user tries): ``"2m"`` (2M nodes, 10M edges, 256-d features, 16
  classes, 2% training nodes); GraphSAGE-mean, 2 layers, hidden 128, fanouts 10,5, 2 threads;
- **c**: ``"200k"``; GAT, 2 layers, 4 heads (hidden 128 = 4 x 32, heads concatenated; the
  output layer one head), fanouts 10,5, 2 threads, attention dropout 0.5 too;
- **d**: Cora (``../shared/data/cora``, or the bundled copy); GCN, 2 layers, hidden 64, every
  neighbour (``--fanouts all,all``; DGL's ``MultiLayerFullNeighborSampler``), 2 threads,
  self-loops on both sides.

Learning rate 0.003, batch 1024, seed 0. shoal's side is ``shoal train --json`` (its history
has every epoch's seconds and time split, its features as the graph stores them); DGL's side
is :func:`run_dgl` in the venv of ``bench/dgl_env.sh`` (torch 2.2.1), the same loop by hand
with the features in memory as float32. Each shape's two runs are back to back with the same
thread count, so a loaded machine slows both alike; the figures of merit are the ratios of
median epoch times and of the model step (the first epoch of each left out: numba's
compilation, warm-up).

Usage::

    python bench/train.py [--shapes a,b,c,d] [--epochs N] [--skip-dgl]
    python bench/train.py --report-only     # re-render the .md from the .json

With ``--smoke`` every shape runs on the smoke graph (d on Cora) for 2 epochs; the DGL side is
skipped (and said so) when its venv is absent. The profile of a training step:
``bench/train_profile.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

import common

#: shape (a)'s fanouts, hop 1 first (bench/train_profile.py profiles that shape)
FANOUTS = (15, 10, 5)
DGL_PY = common.BENCH / "work" / "dgl-venv" / "bin" / "python"
PHASES = ("sampling", "gather", "forward_backward")
#: the shapes of issue 55 (module docstring); fanouts hop 1 first, -1 for every neighbour
SHAPES: dict[str, dict] = {
    "a": {
        "graph": "200k",
        "model": "sage",
        "hidden": 256,
        "fanouts": list(FANOUTS),
        "threads": 1,
        "epochs": 3,
    },
    "b": {
        "graph": "2m",
        "model": "sage",
        "hidden": 128,
        "fanouts": [10, 5],
        "threads": 2,
        "epochs": 4,
    },
    "c": {
        "graph": "200k",
        "model": "gat",
        "hidden": 128,
        "heads": 4,
        "fanouts": [10, 5],
        "threads": 2,
        "epochs": 3,
    },
    "d": {
        "graph": "cora",
        "model": "gcn",
        "hidden": 64,
        "fanouts": [-1, -1],
        "threads": 2,
        "epochs": 30,
    },
}
LR, DROPOUT, BATCH = 0.003, 0.5, 1024


def run_dgl(graph: Path, shape: dict, epochs: int) -> dict:
    """The DGL side, run in DGL's venv (no shoal import): the graph's edge file and arrays
    loaded into a ``DGLGraph``, then the training loop of ``shape`` timed by phase."""
    import dgl
    import numpy as np
    import torch
    import torch.nn.functional as F
    from dgl.nn import GATConv, GraphConv, SAGEConv

    torch.set_num_threads(shape["threads"])
    torch.manual_seed(0)
    meta = json.loads((graph / "meta.json").read_text())
    e = np.fromfile(graph / "edges.bin", dtype=meta["edge_dtype"]).reshape(-1, 2).astype(np.int64)
    g = dgl.graph(
        (torch.from_numpy(e[:, 0]), torch.from_numpy(e[:, 1])), num_nodes=meta["num_nodes"]
    )
    model = shape["model"]
    if model in ("gcn", "gat"):  # their self-loops, as shoal's GCNConv and GATConv add them
        g = dgl.add_self_loop(dgl.remove_self_loop(g))
    feat = torch.from_numpy(np.load(graph / "features.npy").astype(np.float32))
    labels = torch.from_numpy(np.load(graph / "labels.npy").astype(np.int64))
    train = torch.from_numpy(np.load(graph / "train_idx.npy").astype(np.int64))
    fanouts = shape["fanouts"]
    n = len(fanouts)
    d = [feat.shape[1]] + [shape["hidden"]] * (n - 1) + [int(labels.max()) + 1]
    heads = shape.get("heads", 1)
    if model == "sage":
        layers = torch.nn.ModuleList(SAGEConv(d[i], d[i + 1], "mean") for i in range(n))
    elif model == "gcn":
        layers = torch.nn.ModuleList(
            GraphConv(d[i], d[i + 1], allow_zero_in_degree=True) for i in range(n)
        )
    else:  # hidden heads concatenated, the output layer one head
        layers = torch.nn.ModuleList(
            GATConv(
                d[i],
                d[i + 1] // heads if i < n - 1 else d[i + 1],
                heads if i < n - 1 else 1,
                attn_drop=DROPOUT,
                allow_zero_in_degree=True,
            )
            for i in range(n)
        )
    opt = torch.optim.Adam(layers.parameters(), lr=LR)
    if all(f < 0 for f in fanouts):
        sampler = dgl.dataloading.MultiLayerFullNeighborSampler(n)
    else:
        sampler = dgl.dataloading.NeighborSampler(list(reversed(fanouts)))
    gen = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(epochs):
        t = dict.fromkeys(PHASES, 0.0)
        t_epoch = time.perf_counter()
        perm = train[torch.randperm(len(train), generator=gen)]
        for start in range(0, len(perm), BATCH):
            t0 = time.perf_counter()
            input_nodes, output_nodes, blocks = sampler.sample_blocks(
                g, perm[start : start + BATCH]
            )
            t1 = time.perf_counter()
            h, y = feat[input_nodes], labels[output_nodes]
            t2 = time.perf_counter()
            opt.zero_grad()
            for i, (layer, block) in enumerate(zip(layers, blocks, strict=True)):
                h = layer(block, F.dropout(h, DROPOUT, True))
                if h.dim() == 3:  # GAT: heads concatenated, the last layer's averaged
                    h = h.flatten(1) if i < n - 1 else h.mean(1)
                h = F.relu(h) if i < n - 1 else h
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


def _graph(shape: dict, smoke: bool) -> Path:
    if shape["graph"] == "cora":
        return common.dataset_graph("cora")
    return common.synth_graph("smoke" if smoke else shape["graph"])


def _shoal_flags(shape: dict, epochs: int) -> list:
    fanouts = ",".join("all" if f < 0 else str(f) for f in shape["fanouts"])
    hp = ["--model", shape["model"], f"--fanouts={fanouts}", "--hidden", shape["hidden"]]
    if "heads" in shape:
        hp += ["--heads", shape["heads"]]
    hp += ["--batch-size", BATCH, "--lr", LR, "--dropout", DROPOUT, "--seed", 0]
    hp += ["--no-normalize-features", "--weight-decay", 0]
    return hp + ["--epochs", epochs, "--eval-every", epochs, "--threads", shape["threads"]]


def measure_shape(key: str, shape: dict, args: argparse.Namespace, dgl_py: str | None) -> dict:
    """One shape: shoal, then DGL (unless skipped), back to back."""
    graph = _graph(shape, args.smoke)
    meta = json.loads((graph / "meta.json").read_text())
    epochs = 2 if args.smoke else (args.epochs or shape["epochs"])
    res = {
        "shape": {**shape, "epochs": epochs},
        "graph": {
            "path": common.rel(graph),
            "nodes": meta["num_nodes"],
            "stored_edges": meta["num_edges"],
            "features": meta["feature_dim"],
            "classes": meta["num_classes"],
        },
    }
    t = str(shape["threads"])
    env = {"OMP_NUM_THREADS": t, "NUMBA_NUM_THREADS": t}
    out = common.WORK / "train" / f"shoal-{key}.json"
    hp = _shoal_flags(shape, epochs)
    res["shoal"] = common.train("--graph", graph, *hp, "--no-progress", out=out, env=env)
    res["median"] = {"shoal": summary(res["shoal"])}
    if dgl_py is None:
        return res
    cmd = [dgl_py, __file__, "--dgl-worker", graph, json.dumps(shape), epochs]
    p = common.sh(cmd, env={**os.environ, **env})
    res["dgl"] = json.loads(p.stdout.strip().splitlines()[-1])
    m = res["median"]
    m["dgl"] = summary(res["dgl"])
    m["ratio_shoal_over_dgl"] = m["shoal"]["epoch_seconds"] / m["dgl"]["epoch_seconds"]
    m["step_ratio_shoal_over_dgl"] = (
        m["shoal"]["forward_backward"] / m["dgl"]["forward_backward"]
        if m["dgl"]["forward_backward"]
        else float("nan")
    )
    return res


def measure(args: argparse.Namespace) -> dict:
    keys = [k.strip() for k in args.shapes.split(",") if k.strip()]
    bad = [k for k in keys if k not in SHAPES]
    if bad:
        raise SystemExit(f"--shapes: unknown {bad}; valid: {', '.join(SHAPES)}")
    res = common.new_results("train.py", threads=None, shapes={})
    dgl_py, why = None, None
    if args.skip_dgl:
        why = "--skip-dgl"
    elif args.smoke and not DGL_PY.exists():
        why = f"{common.rel(DGL_PY)} absent; `bash bench/dgl_env.sh` makes it"
    else:
        dgl_py = subprocess.run(
            ["bash", common.BENCH / "dgl_env.sh"], check=True, capture_output=True, text=True
        ).stdout.strip()
    if why:
        res["dgl"] = {"skipped": why}
    for k in keys:
        print(f"[train] shape {k}: {SHAPES[k]}", flush=True)
        res["shapes"][k] = measure_shape(k, SHAPES[k], args, dgl_py)
    return res


def _describe(key: str, r: dict) -> str:
    s, g = r["shape"], r["graph"]
    fan = ",".join("all" if f < 0 else str(f) for f in s["fanouts"])
    model = {"sage": "GraphSAGE-mean", "gat": "GAT", "gcn": "GCN"}[s["model"]]
    heads = f", {s['heads']} heads" if "heads" in s else ""
    return (
        f"({key}) `{g['path']}` ({g['nodes']:,} nodes, {g['stored_edges']:,} stored edges, "
        f"{g['features']}-d, {g['classes']} classes): {model}, {len(s['fanouts'])} layers, "
        f"hidden {s['hidden']}{heads}, fanouts {fan} (hop 1 first), {s['threads']} thread(s), "
        f"{s['epochs']} epochs"
    )


def render(res: dict) -> str:
    dgl = res.get("dgl", {})
    side = (
        f"DGL side: skipped ({dgl['skipped']})."
        if "skipped" in dgl
        else "DGL side: DGL and torch of the venv of `bench/dgl_env.sh` (versions below), "
        "features in memory as float32; shoal side: `shoal train --json` in the repository's "
        "venv."
    )
    shapes = res["shapes"]
    paras = [
        side,
        f"Every shape: dropout {DROPOUT} on every layer's input, Adam lr {LR}, batch {BATCH}, "
        "seed 0; shoal, then DGL, back to back; medians over the epochs after the first. "
        "Shapes (module docstring of `bench/train.py`):",
        "\n".join(f"- {_describe(k, r)}" for k, r in shapes.items()),
    ]
    lines = common.header("Training speed: shoal vs DGL (single process)", res, *paras)
    lines += [
        "| shape | system | epoch (s) | sampling (s) | gather (s) | model step (s) | "
        "peak RSS (MiB) | epoch shoal/DGL | step shoal/DGL |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for k, r in shapes.items():
        m = r.get("median", {})
        for name in ("shoal", "dgl"):
            if name not in m:
                continue
            s = m[name]
            ratio = step = ""
            if name == "shoal" and "ratio_shoal_over_dgl" in m:
                ratio = f"**{m['ratio_shoal_over_dgl']:.3f}**"
                step = f"{m.get('step_ratio_shoal_over_dgl', float('nan')):.3f}"
            lines.append(
                f"| {k} | {name} | {s['epoch_seconds']:.3f} | {s['sampling']:.3f} | "
                f"{s['gather']:.3f} | {s['forward_backward']:.3f} | {s['peak_rss_mib']:.0f} | "
                f"{ratio} | {step} |"
            )
    versions = {(r["dgl"].get("dgl"), r["dgl"].get("torch")) for r in shapes.values() if "dgl" in r}
    if versions:
        lines += ["", "DGL side: " + "; ".join(f"DGL {d}, torch {t}" for d, t in versions) + "."]
    lines += [
        "",
        "Sampling = neighbour sampling to blocks; gather = feature rows (+ labels) of the "
        "batch's nodes; model step = forward, loss, backward and the optimizer step. "
        "Where a step's time goes: [train_profile.md](train_profile.md).",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=",".join(SHAPES), help="shapes to run (default all)")
    ap.add_argument(
        "--epochs", type=int, default=None, help="epochs of every shape (default: the shape's)"
    )
    ap.add_argument("--skip-dgl", action="store_true")
    ap.add_argument("--report-only", action="store_true", help="re-render the .md from the .json")
    ap.add_argument("--dgl-worker", nargs=3, help=argparse.SUPPRESS)
    common.bench_args(ap, out="bench/results/train")
    args = ap.parse_args()
    if args.dgl_worker:  # in DGL's venv
        g, shape, epochs = args.dgl_worker
        print(json.dumps(run_dgl(Path(g), json.loads(shape), int(epochs))))
        return 0
    prefix = common.out_prefix(args, "bench/results/train")
    if args.report_only:
        res = common.load_json(prefix.with_suffix(".json"))
        common.write_text_atomic(prefix.with_suffix(".md"), render(res))
        return 0
    common.write_results(prefix, measure(args), render)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
