"""GraphSAGE on a GPU against the same machine's CPU cores (issue 35), run by ``bench/gpu.sh``.

    python bench/gpu.py [--work DIR] [--out DIR] [--tests-xml FILE] [--epochs 3] [--rehearse]
        [--skip RUNS] [--ooc-memory 2GiB]
    python bench/gpu.py --render gpu.json --out DIR [--command CMD] [--note TEXT]

Every run is ``shoal train --graph G ... --device D --json`` in its own process, one after
the other, with the default threads (all cores). Not ``common.train``: each run's stderr is
kept for ``gpu.sh``'s log, a failed run is a row of the results, and one refused for a
budget below the device's working set is retried at the floor it names plus 256 MiB
(``memory_retry``).

- In memory, ``common.GRAPHS["200k"]`` (the training-speed benchmark's graph, issue 5);
  GraphSAGE-mean, 3 layers, hidden 256, dropout 0.5, batch 1024, fanouts 15,10,5, Adam lr
  0.003: ``cuda-host`` (batches sampled and gathered on the host, copied: ``--sample-on
  host``), ``cuda`` (sampled and gathered on the GPU: ``--sample-on device``, issue 56),
  ``cpu`` (shoal's model), ``cuda-pyg`` (PyG's ``torch_geometric.nn.models.GraphSAGE``
  through ``--model-factory``, called as ``model(x, edge_index)`` on shoal's blocks).
- Out of core, ``common.GRAPHS["2m"]`` (issue 33's graph, 2.05 GB of features); GraphSAGE 2
  layers, hidden 128, fanouts 10,5, ``--memory 2GiB`` (below the feature matrix, process
  included): ``cuda-ooc-host`` / ``cuda-ooc`` (every row cached on the GPU) /
  ``cuda-ooc-cache`` (``--device-memory 512MiB``: the rows of highest in-degree on the GPU,
  the others from the host's store) / ``cpu-ooc``.

The share of an epoch the GPU waits for batches is ``1 - forward_backward / epoch``: the step
(forward, loss, backward, optimizer, and the wait for the batch's host-to-device copy) against
the whole epoch, the rest being the host's sampling and gathering that the read-ahead did not
hide. ``--rehearse``: ``--device cpu`` everywhere on the smoke graph, to check the script
without a GPU (``REHEARSE=1 bash bench/gpu.sh`` adds ``--ooc-memory 256MiB``, below any
process's working set: the retry); ``--smoke``: the same, one epoch, ``cuda-pyg`` and
``cpu-ooc`` only. Writes ``gpu.json`` and ``gpu.md`` into ``--out`` (default
``bench/results``; with ``--smoke``, WORK/smoke).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from common import (
    GRAPHS,
    ROOT,
    SHOAL,
    WORK,
    bench_args,
    command_line,
    header,
    machine,
    parse_size,
    shoal,
    synth_graph,
    write_results,
)

PYG_FACTORY = "tests.loader.factories:pyg_sage"
#: the in-memory workload's model (bench/train.py's, issue 5)
MODEL = ["--model", "sage", "--fanouts", "15,10,5", "--hidden", "256", "--batch-size", "1024"]
MODEL += ["--dropout", "0.5", "--lr", "0.003"]
#: the out-of-core workload's model (issue 33's)
OOC_MODEL = ["--model", "sage", "--fanouts", "10,5", "--hidden", "128"]
OOC_MEMORY = "2GiB"
#: ``cuda-ooc-cache``'s device memory: the 2m graph's CSR copy (96 MB) and about a fifth of
#: its 2.05 GB of rows
DEVICE_CACHE = "512MiB"


def graph(name: str, work: Path | None) -> Path:
    """``common.synth_graph(name)`` under ``work`` (None: WORK) with its CSR built, outside
    the runs."""
    g = synth_graph(name, work=work)
    if not (g / "csr_in").exists():
        shoal("data", "csr", g)
    return g


def train(graph: Path, work: Path, name: str, device: str, epochs: int, extra: list[str]) -> dict:
    """One ``shoal train`` run; its JSON plus the wall time, return code and stderr tail.
    ``extra``: the model's flags and any others."""
    out = work / f"{name}.json"
    out.unlink(missing_ok=True)
    cmd = [*SHOAL, "train", "--graph", str(graph)]
    cmd += ["--epochs", str(epochs), "--eval-every", str(epochs), "--seed", "0"]
    cmd += ["--device", device, "--no-progress", "--json", str(out), *extra]
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])  # tests.loader
    t0 = time.perf_counter()
    p = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path},
        timeout=900,
    )
    (work / f"{name}.stderr").write_text(p.stderr)
    res: dict[str, Any] = {"name": name, "device": device, "extra": extra}
    res |= {"wall_seconds": time.perf_counter() - t0, "returncode": p.returncode}
    if p.returncode != 0 or not out.exists():
        res["error"] = p.stderr[-3000:]
        print(f"[gpu] {name} FAILED ({p.returncode})\n{p.stderr[-3000:]}", flush=True)
        return res
    res["run"] = json.loads(out.read_text())
    print(f"[gpu] {name}: {summary(res)}", flush=True)
    return res


def summary(res: dict) -> dict[str, Any]:
    """Median epoch and its split, the GPU's wait share, accuracy, I/O."""
    run = res.get("run")
    if not run:
        return {"error": True}
    hist = run["history"]
    secs = [h["seconds"] for h in hist]
    fb = [h["time_split"].get("forward_backward", 0.0) for h in hist]
    # medians over the epochs after the first (the first compiles kernels, warms the GPU)
    later = slice(1, None) if len(hist) > 1 else slice(None)
    epoch = statistics.median(secs[later])
    step = statistics.median(fb[later])
    split = {
        k: statistics.median(h["time_split"].get(k, 0.0) for h in hist[later])
        for k in ("sampling", "gather", "read", "io_wait", "forward_backward")
    }
    io = [h.get("io") or {} for h in hist[later]]
    return {
        "epoch_seconds": epoch,
        "first_epoch_seconds": secs[0],
        "step_seconds": step,
        "wait_share": max(0.0, 1.0 - step / epoch) if epoch > 0 else None,
        "split": split,
        "eval_seconds": run.get("eval_seconds"),
        "test_accuracy": run.get("test_accuracy"),
        "bytes_read": statistics.median(i.get("bytes_read", 0) for i in io) if io else 0,
        "unique_bytes": statistics.median(i.get("unique_bytes", 0) or 0 for i in io) if io else 0,
        "peak_rss_bytes": run.get("peak_rss_bytes"),
    }


def cuda_tests(xml: Path | None) -> list[dict[str, str]]:
    """The CUDA tests of a pytest JUnit file: every test case whose id names cuda or gpu,
    with its outcome."""
    if xml is None or not xml.exists():
        return []
    rows = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        if "cuda" in name.lower() or "gpu" in name.lower():
            rows.append({"test": name, "outcome": outcome, "seconds": case.get("time", "")})
    return rows


def device_info() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info |= {"gpu": p.name, "gpu_memory_gib": round(p.total_memory / 2**30, 1)}
        info["multiprocessors"] = p.multi_processor_count
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        info["nvidia_smi"] = smi.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        info["nvidia_smi"] = None
    return info


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "—" if v is None else format(v, spec)


def io_cell(x: dict) -> str:
    if not x["bytes_read"] and not x["unique_bytes"]:
        return "in memory"
    return f"{x['bytes_read'] / 1e6:.0f} MB of {x['unique_bytes'] / 1e6:.0f} MB distinct"


def markdown(res: dict) -> str:
    info, runs = res["device"], {r["name"]: r for r in res["runs"]}
    s = {k: summary(r) for k, r in runs.items()}
    gpu = info.get("gpu") or "no GPU (a rehearsal on the CPU)"
    in_memory = bool({"cuda", "cuda-host", "cpu", "cuda-pyg"} & runs.keys())
    lines = header(
        "GraphSAGE on a GPU against the same machine's CPU cores (issues 35, 56)",
        res,
        f"Device: **{gpu}** ({info.get('nvidia_smi') or ''}); torch {info['torch']}, "
        f"CUDA {info.get('cuda')}",
        (f"Workload: {res['workload']}. " if in_memory else "")
        + f"{res['epochs']} epochs per run; medians over the epochs after the first. Wait = "
        "the share of an epoch outside the training step (1 - forward/backward ÷ epoch): the "
        "GPU idles while the host samples and gathers what the read-ahead did not hide.",
    )
    lines += [
        "| run | device | epoch (s) | first epoch (s) | step (s) | GPU waits | sampling (s) "
        "| gather (s) | evaluation (s) | test acc. | feature bytes read / epoch | peak RSS (MiB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in runs.items():
        if "error" in r:
            lines.append(f"| {name} | {r['device']} | failed (exit {r['returncode']}) |" + " |" * 9)
            continue
        x = s[name]
        wait = f"{x['wait_share']:.0%}" if r["device"] != "cpu" else "—"
        rss = x["peak_rss_bytes"]
        lines.append(
            f"| {name} | {r['device']} | {x['epoch_seconds']:.2f} | "
            f"{x['first_epoch_seconds']:.2f} | {x['step_seconds']:.2f} | {wait} | "
            f"{x['split']['sampling']:.2f} | {x['split']['gather']:.2f} | "
            f"{_fmt(x['eval_seconds'], '.1f')} | {_fmt(x['test_accuracy'], '.4f')} | "
            f"{io_cell(x)} | {_fmt(rss / 2**20 if rss else None, '.0f')} |"
        )
    lines += ["", "## Ratios (same machine, same run of this script)", ""]

    def ratio(a: str, b: str, label: str) -> None:
        if a in s and b in s and "error" not in runs[a] and "error" not in runs[b]:
            lines.append(f"- {label}: {s[a]['epoch_seconds'] / s[b]['epoch_seconds']:.2f}x")

    ratio(
        "cuda",
        "cuda-host",
        "GPU epoch, batches made on the device / made on the host "
        "and copied, features in memory (issue 56: at most 0.6x)",
    )
    ratio(
        "cuda-ooc",
        "cuda-ooc-host",
        "GPU epoch, batches made on the device / on the host, out of core (issue 56: below 1x)",
    )
    ratio(
        "cuda-ooc-cache",
        "cuda-ooc-host",
        "GPU epoch, a partial device cache / batches made on the host, out of core",
    )
    ratio("cpu", "cuda", "CPU epoch / GPU epoch, features in memory")
    ratio("cpu-ooc", "cuda-ooc", "CPU epoch / GPU epoch, out of core")
    ratio("cuda-pyg", "cuda", "PyG GraphSAGE epoch / shoal SAGE epoch, both on the GPU")
    for name in ("cuda-host", "cuda", "cuda-pyg", "cuda-ooc-host", "cuda-ooc", "cuda-ooc-cache"):
        if name in s and "error" not in runs[name]:
            x = s[name]
            lines.append(
                f"- {name}: the GPU waits {x['wait_share']:.0%} of the epoch; a GPU fed without "
                f"waiting would run the epoch in {x['step_seconds']:.2f} s instead of "
                f"{x['epoch_seconds']:.2f} s ({x['epoch_seconds'] / x['step_seconds']:.2f}x)"
            )
    if "feature_bytes" in res:
        lines.append(
            f"- out of core: {res['ooc_workload']}; its {res['feature_bytes'] / 1e6:.0f} MB "
            "feature matrix is "
            + ("larger" if res["feature_bytes"] > parse_size(res["ooc_memory"]) else "smaller")
            + " than the whole budget, process included"
        )
    for name, r in runs.items():
        if "memory_retry" in r:
            m = r["memory_retry"]
            lines.append(
                f"- {name}: `--memory {m['asked']}` is below this device's working set (the "
                f"run said: give {m['floor']} or more); it ran with "
                f"{int(m['used']) / 2**30:.2f} GiB"
            )
    if res.get("notes"):
        lines += ["", "## Notes", "", *(f"- {n}" for n in res["notes"])]
    tests = res.get("cuda_tests") or []
    if res.get("tests_command"):
        counts = {o: sum(t["outcome"] == o for t in tests) for o in ("passed", "failed", "skipped")}
        lines += [
            "",
            f"## CUDA tests ({counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['skipped']} skipped)",
            "",
            f"Command: `{res['tests_command']}`; summary: {res.get('tests_summary', '')}",
            "",
            "| test | outcome | seconds |",
            "|---|---|---|",
            *(f"| `{t['test']}` | {t['outcome']} | {t['seconds']} |" for t in tests),
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    bench_args(ap)
    ap.add_argument("--work", type=Path, default=WORK / "gpu", help="scratch (graphs, runs)")
    ap.add_argument("--out", type=Path, help="where gpu.json and gpu.md go")
    ap.add_argument("--tests-xml", type=Path, help="pytest --junitxml of the CUDA tests")
    ap.add_argument("--tests-summary", default="", help="pytest's last line")
    ap.add_argument("--tests-command", default="", help="the pytest command that ran")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--rehearse", action="store_true", help="cpu everywhere, the smoke graph")
    ap.add_argument("--skip", default="", help="comma-separated runs to leave out")
    ap.add_argument("--ooc-memory", default=OOC_MEMORY, help=f"default {OOC_MEMORY}")
    ap.add_argument(
        "--device-cache",
        default=DEVICE_CACHE,
        help=f"cuda-ooc-cache's --device-memory: the CSR and a part of the rows (default "
        f"{DEVICE_CACHE})",
    )
    ap.add_argument(
        "--command",
        help="the command to record (default: this script's command line; bench/gpu.sh "
        "passes its own)",
    )
    ap.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="only write gpu.md (and gpu.json) into --out from a gpu.json a device run made "
        "(with --command: the command that made it, where the JSON names another)",
    )
    ap.add_argument("--note", action="append", default=[], help="with --render: a line to add")
    args = ap.parse_args(argv)
    out = args.out or (WORK / "smoke" if args.smoke else ROOT / "bench" / "results")
    if args.render:
        res = json.loads(args.render.read_text())
        if args.command:
            res["command"] = args.command
        for key in ("tests_command", "tests_summary"):  # when the JSON's run lacked them
            res[key] = getattr(args, key) or res.get(key, "")
        res["notes"] = [*res.get("notes", []), *args.note]
        write_results(out / "gpu", res, markdown)
        return 0
    if args.smoke:
        skip = "cuda-host,cuda,cpu,cuda-ooc-host,cuda-ooc,cuda-ooc-cache"
        args.rehearse, args.epochs, args.skip = True, 1, skip
    args.work.mkdir(parents=True, exist_ok=True)
    small, big = ("smoke", "smoke") if args.rehearse else ("200k", "2m")
    gwork = None if args.smoke else args.work  # smoke: the smoke graph every script shares
    g = graph(small, gwork)
    gpu = "cpu" if args.rehearse else "cuda"
    skip = set(filter(None, args.skip.split(",")))
    spec, ooc_spec = GRAPHS[small], GRAPHS[big]
    res: dict[str, Any] = {
        "command": args.command or command_line("gpu.py", argv),
        "machine": machine(),
        "device": device_info(),
        "workload": f"synthetic DC-SBM graph, {spec['nodes']:,} nodes, {spec['edges'] * 2:,} "
        f"stored edges, {spec['features']}-d features, {spec['classes']} classes, "
        f"{spec.get('train-frac', 0.1):.0%} training nodes; GraphSAGE-mean 3 layers, hidden 256, "
        "dropout 0.5, batch 1024, fanouts 15,10,5, Adam lr 0.003",
        "ooc_workload": f"synthetic DC-SBM graph, {ooc_spec['nodes']:,} nodes, "
        f"{ooc_spec['edges'] * 2:,} stored edges, {ooc_spec['features']}-d features, "
        f"{ooc_spec['classes']} classes, {ooc_spec.get('train-frac', 0.1):.0%} training and "
        f"{ooc_spec.get('val-frac', 0.1):.1%} validation nodes; GraphSAGE-mean 2 layers, hidden "
        f"128, fanouts 10,5, `--memory {args.ooc_memory}`",
        "epochs": args.epochs,
        "ooc_memory": args.ooc_memory,
        "runs": [],
        "cuda_tests": cuda_tests(args.tests_xml),
        "tests_summary": args.tests_summary,
        "tests_command": args.tests_command,
    }

    def run(name: str, g: Path, dev: str, extra: list[str]) -> None:
        if name in skip:
            return
        r = train(g, args.work, name, dev, args.epochs, extra)
        floor = re.search(r"give --memory (\S+) or more", r.get("error", ""))
        if floor and "--memory" in extra:  # the budget is below this device's working set
            i = extra.index("--memory") + 1
            retry = f"{parse_size(floor.group(1)) + (256 << 20)}"
            print(f"[gpu] {name}: retrying with --memory {retry} (floor {floor.group(1)})")
            r = train(g, args.work, name, dev, args.epochs, [*extra[:i], retry, *extra[i + 1 :]])
            r["memory_retry"] = {"asked": extra[i], "floor": floor.group(1), "used": retry}
        res["runs"].append(r)
        write_results(out / "gpu", res, markdown)

    write_results(out / "gpu", res, markdown)
    host, dev = ["--sample-on", "host"], ["--sample-on", "device"]
    run("cuda-host", g, gpu, [*MODEL, *host])
    run("cuda", g, gpu, [*MODEL, *dev])
    run("cpu", g, "cpu", MODEL)
    run("cuda-pyg", g, gpu, [*MODEL, *dev, "--model-factory", PYG_FACTORY])
    if not {"cuda-ooc-host", "cuda-ooc", "cuda-ooc-cache", "cpu-ooc"} <= skip:
        ooc = graph(big, gwork)
        res["feature_bytes"] = (ooc / "features.npy").stat().st_size
        mem = ["--memory", args.ooc_memory, "--scratch-dir", str(args.work / "scratch")]
        run("cuda-ooc-host", ooc, gpu, [*OOC_MODEL, *mem, *host])
        run("cuda-ooc", ooc, gpu, [*OOC_MODEL, *mem, *dev])
        cache = ["--device-memory", args.device_cache]
        run("cuda-ooc-cache", ooc, gpu, [*OOC_MODEL, *mem, *dev, *cache])
        run("cpu-ooc", ooc, "cpu", [*OOC_MODEL, *mem])
    write_results(out / "gpu", res, markdown)
    print((out / "gpu.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
