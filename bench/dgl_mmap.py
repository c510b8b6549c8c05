"""DGL with its features memory-mapped: the "PyG/DGL + mmap" out-of-core baseline, capped and not.

    python bench/dgl_mmap.py --graph 2m --epochs 4 --caps 1.5GiB
    python bench/dgl_mmap.py --graph 10m --epochs 3 --caps fraction:8
    python bench/dgl_mmap.py --report-only

The baseline of the Ginex and DiskGNN papers, done as a careful DGL user would: the graph's
in-edge CSR (``csr_in``, else its edge list) loaded into a ``DGLGraph`` restricted to the CSC
format neighbour sampling reads (in memory: DGL has no out-of-core structure), the features
``np.load(mmap_mode="r")`` from the graph's ``features.npy`` and gathered as
``feat[input_nodes]`` (page faults on the rows a batch touches), then DGL 2.1's
``NeighborSampler`` and a GraphSAGE of ``SAGEConv(mean)`` layers: the model of
``bench/out_of_core.py`` (2 layers, hidden 128, fanouts 10,5 hop 1 first, batch 1024, 2
threads, Adam lr 0.003, dropout 0.5). It runs in the venv of ``bench/dgl_env.sh`` (DGL is not
a shoal dependency), uncapped and inside each cap (a cgroup-v1 memory group over the process
and its page cache; ``fraction:K``: a K-th of the features plus the footprint of shoal's
uncapped run in ``bench/results/out_of_core.json``, the same cap as shoal's row), the graph's
page cache dropped before each run. Results: ``bench/results/dgl_mmap.{md,json}``, beside
shoal's rows of the same graph in ``bench/results/out_of_core.md``. ``--smoke``: the smoke
graph, 1 epoch, skipped (and said so) where DGL's venv is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from common import (
    BENCH,
    GRAPHS,
    ROOT,
    WORK,
    bench_args,
    cap_bytes,
    caps_available,
    header,
    load_json,
    out_prefix,
    record_command,
    rel,
    run_capped,
    synth_graph,
    write_results,
)

GiB = 1 << 30
DGL_PY = BENCH / "work" / "dgl-venv" / "bin" / "python"
FANOUTS = (10, 5)
PHASES = ("sampling", "gather", "forward_backward")


def dgl_epochs(graph: Path, epochs: int, threads: int, out: Path) -> None:
    """The DGL side (in DGL's venv; no shoal import): per-epoch seconds and time split to
    ``out`` (JSON), written after every epoch, so a run killed by its cap keeps its epochs."""
    import dgl
    import numpy as np
    import torch
    import torch.nn.functional as F
    from dgl.nn import SAGEConv

    t_start = time.perf_counter()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    meta = json.loads((graph / "meta.json").read_text())
    if (graph / "csr_in" / "indptr.npy").exists():  # the lean graph: its in-edge CSC only
        indptr = torch.from_numpy(np.load(graph / "csr_in" / "indptr.npy").astype(np.int64))
        indices = torch.from_numpy(np.load(graph / "csr_in" / "indices.npy").astype(np.int64))
        g = dgl.graph(("csc", (indptr, indices, torch.empty(0, dtype=torch.int64))))
        del indptr, indices
    else:
        e = np.fromfile(graph / "edges.bin", dtype=meta["edge_dtype"]).reshape(-1, 2)
        src, dst = (torch.from_numpy(e[:, k].astype(np.int64)) for k in (0, 1))
        g = dgl.graph((src, dst), num_nodes=meta["num_nodes"])
        del e, src, dst
    g = g.formats("csc")  # the one format in-neighbour sampling reads: no COO/CSR copies
    feat = np.load(graph / "features.npy", mmap_mode="r")  # the page cache's to keep
    labels = torch.from_numpy(np.load(graph / "labels.npy").astype(np.int64))
    train = torch.from_numpy(np.load(graph / "train_idx.npy").astype(np.int64))
    dims = [feat.shape[1], 128, int(labels.max()) + 1]
    layers = torch.nn.ModuleList(SAGEConv(dims[i], dims[i + 1], "mean") for i in range(2))
    opt = torch.optim.Adam(layers.parameters(), lr=0.003)
    sampler = dgl.dataloading.NeighborSampler(list(reversed(FANOUTS)))
    gen = torch.Generator().manual_seed(0)
    res = {"dgl": dgl.__version__, "torch": torch.__version__, "history": []}
    res["start_seconds"] = time.perf_counter() - t_start
    for _ in range(epochs):
        t = dict.fromkeys(PHASES, 0.0)
        t_epoch = time.perf_counter()
        perm = train[torch.randperm(len(train), generator=gen)]
        for start in range(0, len(perm), 1024):
            t0 = time.perf_counter()
            input_nodes, output_nodes, blocks = sampler.sample_blocks(g, perm[start : start + 1024])
            t1 = time.perf_counter()
            h = torch.from_numpy(np.asarray(feat[input_nodes.numpy()], dtype=np.float32))
            y = labels[output_nodes]
            t2 = time.perf_counter()
            opt.zero_grad()
            for i, (layer, block) in enumerate(zip(layers, blocks, strict=True)):
                h = layer(block, F.dropout(h, 0.5, True))
                h = F.relu(h) if i == 0 else h
            loss = F.cross_entropy(h, y)
            loss.backward()
            opt.step()
            t3 = time.perf_counter()
            for k, dt in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                t[k] += dt
        res["history"].append(
            {"seconds": time.perf_counter() - t_epoch, "time_split": t, "loss": float(loss)}
        )
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(res))
        os.replace(tmp, out)


def dgl_ready() -> bool:
    """Whether DGL's venv exists and imports DGL."""
    if not DGL_PY.exists():
        return False
    probe = subprocess.run([str(DGL_PY), "-c", "import dgl"], capture_output=True, timeout=300)
    return probe.returncode == 0


def run(
    graph: Path, tag: str, cap: int | None, epochs: int, work: Path, timeout: float | None
) -> dict:
    """One DGL run (uncapped when ``cap`` is None) in a fresh memory group, stopped after
    ``timeout`` seconds (None: ``epochs`` half-hours and one more)."""
    out = work / f"{graph.name}-{tag.replace(' ', '-').replace(':', '')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    cmd = [str(DGL_PY), __file__, "--dgl-worker", str(graph), str(epochs), "2", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    print(f"[dgl {tag}] {graph.name}, {epochs} epochs", flush=True)
    res = run_capped(
        cmd,
        cap,
        name=f"dgl_mmap_{os.getpid()}",
        evict_paths=[graph],
        cwd=ROOT,
        env=env,
        timeout=timeout or epochs * 1800 + 1800,
    )
    res.update(tag=tag, cap=cap)
    if out.exists():
        res["dgl"] = json.loads(out.read_text())
    print(f"[dgl {tag}] rc={res['returncode']} {res['seconds']:.0f} s", flush=True)
    return res


def _row(r: dict) -> str:
    d = r.get("dgl") or {}
    hist = d.get("history") or []
    cg = r.get("cgroup") or {}
    cap = "none" if not r["cap"] else f"{r['cap'] / GiB:.2f} GiB"
    if r.get("timed_out"):
        cap += f" (stopped at the {r['seconds']:.0f} s timeout, {len(hist)} epochs done)"
    elif r["returncode"] != 0:
        cap += f" (rc {r['returncode']}, OOM kills {cg.get('oom_kill')}, {len(hist)} epochs done)"
    if not hist:  # stopped before its first epoch ended: what it had read by then
        read = f"{r.get('read_bytes', 0) / 1e9:.1f} / -"
        return f"| {r['tag']} | {cap} | {r['seconds']:.0f} | - | none | - | - | - | - | {read} |"
    med = statistics.median
    secs = [h["seconds"] for h in hist]
    split = {k: med([h["time_split"][k] for h in hist]) for k in PHASES}
    peak = (cg.get("peak_sampled") or {}).get("rss+cache") or r.get("maxrss_bytes")
    return (
        f"| {r['tag']} | {cap} | {r['seconds']:.0f} | {d.get('start_seconds', 0):.0f} | "
        f"{' / '.join(f'{x:.1f}' for x in secs)} | {med(secs):.1f} | "
        + " | ".join(f"{split[k]:.1f}" for k in PHASES)
        + f" | {r.get('read_bytes', 0) / 1e9:.1f} / {(peak or 0) / GiB:.2f} |"
    )


TABLE = (
    "| run | cap | wall s | start s | epoch seconds | median | sampling | gather "
    "| forward + backward | read GB / peak GiB |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def render(res: dict) -> str:
    lines = header(
        "DGL + mmap: the out-of-core baseline",
        res,
        "DGL 2.1 as a new user runs it on a graph larger than memory: the structure in a "
        "`DGLGraph`, the features memory-mapped from `features.npy` and gathered by indexing "
        "(page faults), GraphSAGE 10,5 hidden 128 batch 1024, 2 threads: `bench/out_of_core.py`'s "
        "model. `start`: loading the graph. `read / peak`: GB the process read from disk, and "
        "its group's peak (rss + page cache; uncapped: max RSS).",
    )
    for name, s in res["graphs"].items():
        lines += [
            f"## {name}",
            "",
            f"Command: `{s['command']}` ({s['date']}). DGL {s.get('dgl', '-')}, torch "
            f"{s.get('torch', '-')}.",
            "",
        ]
        if s.get("skipped"):
            lines += [f"Skipped: {s['skipped']}.", ""]
            continue
        lines += [TABLE, *[_row(r) for r in s["runs"]], ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench_args(ap, out="bench/results/dgl_mmap")
    ap.add_argument("--graph", choices=("2m", "10m"), default="2m")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--caps", default="1.5GiB", help="comma-separated caps (sizes or fraction:K)")
    ap.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="stop each run after this many seconds, recorded as timed out (default: the "
        "epochs' half-hours and one more); a run stopped before its first epoch shows the "
        "bytes it had read",
    )
    ap.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    ap.add_argument("--dgl-worker", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.dgl_worker:  # in DGL's venv
        g, epochs, threads, out = a.dgl_worker
        dgl_epochs(Path(g), int(epochs), int(threads), Path(out))
        return
    prefix = out_prefix(a, "bench/results/dgl_mmap")
    res = load_json(prefix.with_suffix(".json"), {"graphs": {}})
    if a.report_only:
        write_results(prefix, res, render)
        return
    name, epochs = ("smoke", 1) if a.smoke else (a.graph, a.epochs)
    record_command(res, name, "dgl_mmap.py")
    s = {"command": res["commands"][name], "date": time.strftime("%Y-%m-%d %H:%M UTC")}
    res["graphs"][name] = s
    if not dgl_ready():
        why = f"DGL is not importable by {rel(DGL_PY)}: `bash bench/dgl_env.sh` makes its venv"
        if not a.smoke:
            raise SystemExit(why)
        s["skipped"] = why
        write_results(prefix, res, render)
        return
    capped = caps_available(a.smoke)
    g = synth_graph(name)
    features = (g / "features.npy").stat().st_size
    shoal_runs = load_json(ROOT / "bench/results/out_of_core.json", {"graphs": {}})["graphs"]
    base = next(
        (
            r.get("train")
            for r in shoal_runs.get(name, {}).get("runs", [])
            if r["tag"] == "uncapped"
        ),
        None,
    )
    work = (WORK / "smoke" if a.smoke else WORK) / "dgl_mmap"
    s["graph"] = {"name": name, **GRAPHS[name]}
    s["runs"] = [run(g, "uncapped", None, epochs, work, a.timeout)]
    for spec in ("2GiB" if a.smoke else a.caps).split(","):
        cap = cap_bytes(spec, features, base) if capped else None
        capped_run = run(g, f"capped {spec}", cap, epochs, work, a.timeout)
        s["runs"].append({**capped_run, "cap_spec": spec})
    got = next((r["dgl"] for r in s["runs"] if r.get("dgl")), {})
    s.update(dgl=got.get("dgl"), torch=got.get("torch"))
    write_results(prefix, res, render)
    print(prefix.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
