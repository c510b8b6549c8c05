"""Where a training step's time goes, and the same-torch comparison (issue 16).

On ``bench/train.py``'s workload (:func:`common.synth_graph` ``("200k")``; GraphSAGE-mean, 3
layers, hidden 256, dropout 0.5, batch 1024, fanouts 15,10,5, one thread) it measures, back to
back in one process on the same sampled batches:

- **steps**: the median time of one optimizer step (forward, loss, backward, Adam) of
  shoal's SAGE with shoal's dropout (numba mask, ReLU fused with the next layer's dropout),
  of the same model with torch's ``F.dropout`` (the ablation of ``shoal.nn.dropout``), and of
  PyG's own ``torch_geometric.nn.models.GraphSAGE`` run on the same blocks through
  ``shoal.nn.adapter.EdgeIndexModel`` (``--model-factory``'s path): the same torch (the
  repository's, not the DGL venv's 2.2.1), so the step ratio is the models' and kernels'
  alone;
- **profile**: ``torch.profiler`` on one step of each shoal variant: the operators with the
  largest self CPU time and their share of the step;
- **aggregation**: forward + backward of the mean over the outer block's sampled edges as
  shoal computes it (``torch.sparse.mm`` on the block's CSR, ``reduce="mean"``) and as PyG's
  message passing does (gather one message per edge, ``torch_geometric.utils.scatter``).

- **shapes**: every shape of ``bench/train.py`` (``SHAPES``: SAGE, GAT, GCN), shoal's model
  step on its own sampled batches at 1 and 2 threads (torch's intra-op threads and numba's
  together), the allocator keeping the step's memory as the epoch loop lets it
  (``BudgetPlan.kept_step_memory``), and ``torch.profiler``'s operators of one step at the
  shape's thread count (per step, over the timed steps).

A custom worker, not ``shoal train``: the three models must see the same batches in one process
and be profiled per step. Its trainers are configured with ``TrainConfig.from_options``, as the
CLI's flags are read.

Usage::

    python bench/train_profile.py [--steps 5] [--threads 1] [--shapes a,b,c,d]
    python bench/train_profile.py --report-only     # re-render the .md from the .json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import common
from train import BATCH, DROPOUT, FANOUTS, LR, SHAPES  # bench/train.py: the workloads

VARIANTS = ("shoal", "torch-dropout", "pyg-graphsage")


def _trainer(graph: Path, threads: int, model=None):
    from shoal.training import TrainConfig, TrainData, Trainer

    cfg = TrainConfig.from_options(
        model="sage",
        fanouts=FANOUTS,
        batch_size=1024,
        hidden=256,
        epochs=1,
        lr=0.003,
        dropout=0.5,
        seed=0,
        threads=threads,
        progress=False,
    )
    return Trainer(cfg, TrainData.from_graph_dir(graph), model=model)


def _shape_trainer(graph: Path, shape: dict):
    from shoal.training import TrainConfig, TrainData, Trainer

    cfg = TrainConfig.from_options(
        model=shape["model"],
        fanouts=tuple(shape["fanouts"]),
        batch_size=BATCH,
        hidden=shape["hidden"],
        epochs=1,
        lr=LR,
        dropout=DROPOUT,
        seed=0,
        threads=shape["threads"],
        progress=False,
        normalize_features=False,
        weight_decay=0.0,
        **({"heads": shape["heads"]} if "heads" in shape else {}),
    )
    return Trainer(cfg, TrainData.from_graph_dir(graph))


def _set_threads(n: int) -> None:
    import numba
    import torch

    torch.set_num_threads(n)
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


def _shape(key: str, shape: dict, steps: int, smoke: bool) -> dict:
    """One shape of ``bench/train.py``: median step at 1 and 2 threads, the profile of one step
    at the shape's own thread count."""
    from itertools import chain, count, islice

    from shoal.utils.memory import keep_freed_memory, return_freed_memory

    if shape["graph"] == "cora":
        graph = common.dataset_graph("cora")
    else:
        graph = common.synth_graph("smoke" if smoke else shape["graph"])
    t = _shape_trainer(graph, shape)
    epochs = chain.from_iterable(t.loader.epoch(e) for e in count())
    batches = list(islice(epochs, steps + 1))
    keep_freed_memory(t.kept_step_memory)  # as the epoch loop does
    try:
        out = {"graph": common.rel(graph), "shape": shape, "steps": {}}
        for n in (1, 2):
            _set_threads(n)
            out["steps"][str(n)] = _step_times(t, batches)
        _set_threads(shape["threads"])
        out["profile"] = _profile(t, batches[1:], top=10)
    finally:
        return_freed_memory()
    out["batch"] = {
        "nodes": int(len(batches[-1].mb.n_id)),
        "edges_per_block": [b.num_edges for b in batches[-1].mb.blocks],
    }
    return out


def _pyg_model(in_dim: int, out_dim: int):
    from torch_geometric.nn.models import GraphSAGE

    from shoal.nn.adapter import EdgeIndexModel

    return EdgeIndexModel(
        GraphSAGE(in_dim, 256, num_layers=3, out_channels=out_dim, dropout=0.5, aggr="mean"),
        num_layers=3,
    )


class _TorchDropout:
    """Within the block: shoal's models use ``torch.nn.functional.dropout`` (the ablation)."""

    def __enter__(self):
        import torch.nn.functional as F

        import shoal.nn.base as base

        self.saved = (base.dropout, base.relu_dropout)
        base.dropout = lambda x, p, training: F.dropout(x, p, training)
        base.relu_dropout = lambda x, p, training: F.dropout(F.relu(x), p, training)
        return self

    def __exit__(self, *exc):
        import shoal.nn.base as base

        base.dropout, base.relu_dropout = self.saved


def _step_times(trainer, batches) -> list[float]:
    from shoal.training import train_step

    train_step(trainer.model, trainer.optimizer, batches[0])  # warm-up (numba, allocator)
    out = []
    for b in batches[1:]:
        t = time.perf_counter()
        train_step(trainer.model, trainer.optimizer, b)
        out.append(time.perf_counter() - t)
    return out


def _profile(trainer, batch, top: int = 8) -> list[dict]:
    """``torch.profiler``'s operators of one step on ``batch`` (or of every step on a list of
    batches, per step)."""
    import torch

    from shoal.training import train_step

    batches = batch if isinstance(batch, list) else [batch]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for b in batches:
            train_step(trainer.model, trainer.optimizer, b)
    rows = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in rows)
    rows.sort(key=lambda e: -e.self_cpu_time_total)
    return [
        {
            "op": e.key,
            "self_ms": e.self_cpu_time_total / 1e3 / len(batches),
            "share": e.self_cpu_time_total / total,
        }
        for e in rows[:top]
    ]


def _aggregation(batch, dim: int = 128, repeats: int = 5) -> dict:
    """Mean over the outer block's edges, forward + backward: CSR product vs PyG's scatter."""
    import torch
    from torch_geometric.utils import scatter

    from shoal.nn.base import mean_aggregate

    blk = batch.mb.blocks[0]
    x = torch.randn(blk.num_src, dim, requires_grad=True)
    src, dst = blk.edge_index

    def csr():
        mean_aggregate(x, blk).sum().backward()

    def edges():
        scatter(x[src], dst, dim=0, dim_size=blk.num_dst, reduce="mean").sum().backward()

    out = {"edges": blk.num_edges, "sources": blk.num_src, "targets": blk.num_dst, "dim": dim}
    for name, fn in (("csr_sparse_mm", csr), ("pyg_scatter", edges)):
        fn()
        ts = []
        for _ in range(repeats):
            x.grad = None
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        out[f"{name}_seconds"] = statistics.median(ts)
    return out


def measure(args: argparse.Namespace) -> dict:
    from itertools import chain, count, islice

    import torch
    import torch_geometric

    graph = common.synth_graph("smoke" if args.smoke else "200k")
    base = _trainer(graph, args.threads)
    epochs = chain.from_iterable(base.loader.epoch(e) for e in count())
    batches = list(islice(epochs, args.steps + 1))

    res = common.new_results(
        "train_profile.py",
        threads=args.threads,
        torch=torch.__version__,
        pyg=torch_geometric.__version__,
        graph=common.rel(graph),
        steps={},
        profile={},
    )
    res["threads"] = args.threads
    res["steps"]["shoal"] = _step_times(base, batches)
    res["profile"]["shoal"] = _profile(base, batches[-1])
    with _TorchDropout():
        t = _trainer(graph, args.threads)
        res["steps"]["torch-dropout"] = _step_times(t, batches)
        res["profile"]["torch-dropout"] = _profile(t, batches[-1])
    data = base.data
    pyg = _trainer(graph, args.threads, model=_pyg_model(data.feature_dim, data.num_classes))
    res["steps"]["pyg-graphsage"] = _step_times(pyg, batches)
    res["aggregation"] = _aggregation(batches[-1])
    res["batch"] = {
        "nodes": int(len(batches[-1].mb.n_id)),
        "edges_per_block": [b.num_edges for b in batches[-1].mb.blocks],
    }
    res["shapes"] = {}
    for key in args.shapes.split(","):
        if key not in SHAPES:
            raise SystemExit(f"--shapes: unknown {key!r}; valid: {', '.join(SHAPES)}")
        print(f"[train_profile] shape {key}", flush=True)
        res["shapes"][key] = _shape(key, SHAPES[key], args.steps, args.smoke)
    _set_threads(args.threads)
    return res


def render(res: dict) -> str:
    med = {k: statistics.median(v) for k, v in res["steps"].items()}
    b = res["batch"]
    md = common.header(
        "Training step profile (shoal's single-process trainer)",
        res,
        f"torch {res['torch']}, torch_geometric {res['pyg']} (every row: the same torch).",
        f"Workload: `{res['graph']}` (`bench/train.py`'s graph), SAGE-mean 3 layers, hidden "
        f"256, dropout 0.5, batch 1024, fanouts 15,10,5, {res['threads']} thread; one batch "
        f"holds {b['nodes']:,} nodes and {', '.join(f'{e:,}' for e in b['edges_per_block'])} "
        "edges per block (input layer first). Steps: median over the same sampled batches, run "
        "back to back in one process.",
    )
    md += ["| model / dropout | median step (s) | ratio to shoal |", "|---|---|---|"]
    names = {
        "shoal": "shoal SAGE, shoal's dropout (numba, fused ReLU)",
        "torch-dropout": "shoal SAGE, torch's F.dropout",
        "pyg-graphsage": "PyG GraphSAGE (SAGEConv) on the same blocks, same torch",
    }
    for k in VARIANTS:
        md.append(f"| {names[k]} | {med[k]:.3f} | {med[k] / med['shoal']:.2f} |")
    for k in ("shoal", "torch-dropout"):
        md += [
            "",
            f"## torch.profiler, one step: {names[k]}",
            "",
            "| operator | self CPU (ms) | share of the step |",
            "|---|---|---|",
        ]
        md += [
            f"| `{r['op']}` | {r['self_ms']:.1f} | {100 * r['share']:.1f}% |"
            for r in res["profile"][k]
        ]
    a = res["aggregation"]
    md += [
        "",
        "## Mean aggregation over the outer block, forward + backward",
        "",
        f"{a['edges']:,} sampled edges from {a['sources']:,} sources to {a['targets']:,} "
        f"targets, {a['dim']} columns: CSR product (`torch.sparse.mm`, reduce='mean') "
        f"{a['csr_sparse_mm_seconds']:.3f} s, PyG-style gather + scatter "
        f"{a['pyg_scatter_seconds']:.3f} s "
        f"({a['pyg_scatter_seconds'] / a['csr_sparse_mm_seconds']:.1f}x).",
    ]
    if res.get("shapes"):
        md += _render_shapes(res["shapes"])
    return "\n".join(md) + "\n"


def _render_shapes(shapes: dict) -> list[str]:
    md = [
        "",
        "## The shapes of `bench/train.py`: threads and operators",
        "",
        "shoal's model step (forward, loss, backward, Adam) on each shape's own sampled "
        "batches, median over the same batches at 1 and 2 threads (torch's and numba's "
        "together), the step's freed memory kept by the allocator as the epoch loop keeps it.",
        "",
        "| shape | batch nodes | edges per block | step at 1 thread (s) | at 2 threads (s) | "
        "2 threads / 1 |",
        "|---|---|---|---|---|---|",
    ]
    for key, r in shapes.items():
        one, two = (statistics.median(r["steps"][n]) for n in ("1", "2"))
        sh = r["shape"]
        what = f"{key}: {sh['model']} hidden {sh['hidden']}, fanouts {sh['fanouts']}"
        md.append(
            f"| {what} | {r['batch']['nodes']:,} | "
            f"{', '.join(f'{e:,}' for e in r['batch']['edges_per_block'])} | {one:.4f} | "
            f"{two:.4f} | {two / one:.2f} |"
        )
    for key, r in shapes.items():
        md += [
            "",
            f"### torch.profiler, shape {key} ({r['shape']['threads']} threads, per step over "
            f"the timed steps)",
            "",
            "| operator | self CPU (ms) | share of the step |",
            "|---|---|---|",
        ]
        md += [
            f"| `{p['op']}` | {p['self_ms']:.2f} | {100 * p['share']:.1f}% |" for p in r["profile"]
        ]
    return md


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5, help="timed steps per variant")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--shapes",
        default=",".join(SHAPES),
        help="bench/train.py's shapes to profile besides (default all)",
    )
    ap.add_argument("--report-only", action="store_true", help="re-render the .md from the .json")
    common.bench_args(ap, out="bench/results/train_profile")
    args = ap.parse_args()
    prefix = common.out_prefix(args, "bench/results/train_profile")
    if args.report_only:
        res = common.load_json(prefix.with_suffix(".json"))
        common.write_text_atomic(prefix.with_suffix(".md"), render(res))
        return 0
    if args.smoke:
        args.steps = 2
    common.write_results(prefix, measure(args), render)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
