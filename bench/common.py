"""What the benchmark scripts share: paths, the machine line, the command line, atomic result
files, subprocess helpers and memory-capped runs (cgroup v1).

Importing this module has no side effects (no files, no processes, no imports of torch or
shoal). The scripts import it as ``import common`` with ``bench/`` on ``sys.path`` (Python
puts the script's own folder there when it runs ``python bench/X.py``).

- Paths: :data:`ROOT` (the checkout), :data:`BENCH`, :data:`WORK` (``bench/work``, git-ignored
  data and intermediate files), :data:`RESULTS` (``bench/results``, committed), :data:`SHARED`
  (``../shared/data``, the shared datasets), :data:`PY` and :data:`SHOAL` (``python -m shoal``).
- :func:`machine` (a dict) and :func:`machine_line` (the one-line ``Machine:`` text every
  results file shows: host, CPU, cores, RAM, platform, Python, load, threads).
- :func:`command_line`: ``python bench/<script> ARGS`` as the script was called;
  :func:`record_command` notes it (and the machine) per part of a resumable benchmark;
  :func:`rel` names an input path relative to the checkout.
- :func:`load_json`, :func:`write_text_atomic`, :func:`write_json`: results files written
  through a temporary sibling and a rename, so a reader (or a concurrent invocation of the
  same script) never sees half a file.
- :func:`sh` and :func:`shoal`: run a command, raise with its output's tail when it fails.
  :func:`attempt`: run one that may fail or hang (its own session, a time limit, never
  raises); :func:`outcome`: whether it ran, refused (a ``ShoalInputError``: exit 2 and its
  ``error:`` line), failed (a crash: its last line) or timed out.
- :class:`Cgroup`, :func:`run_capped`, :func:`run_capped_each`, :func:`evict`,
  :func:`parse_size`: every memory claim of shoal's benchmarks is tested under a real cap, not
  read from RSS (which counts the page cache of memory-mapped files and hides thrashing on an
  unlimited machine). The group is a child of this process's own memory cgroup (so it stays
  inside any limit that already applies), its limit covers the process *and its page cache*,
  and it is removed afterwards. Needs root and cgroup v1 mounted at ``/sys/fs/cgroup/memory``.
  ``bench/cgroup.py`` is the same as a command.
- Every script's options: :func:`bench_args` (``--smoke``: a tiny run of every part, which
  ``tests/bench`` runs; ``--out PREFIX``) and :func:`out_prefix`.
- The results writer: :func:`new_results` (command and machine), :func:`header` (the
  markdown's first lines), :func:`write_results` (``PREFIX.json`` and ``PREFIX.md`` from one
  dict), :func:`median`.
- Graphs and stores, each built once under :data:`WORK`: :func:`synth_graph` (the
  :data:`GRAPHS` of the benchmarks, ``smoke`` among them), :func:`partitioned_store`,
  :func:`synth_store`, :func:`dataset_graph` / :func:`dataset_store` (the shared datasets;
  Cora falls back to the bundled copy).
- Training runs: :func:`train` (``shoal train ... --json``: the speed worker of every
  engine benchmark is shoal's own command, whose JSON holds each epoch's seconds, split and
  bytes), :func:`epoch_summary`, :func:`single`, :data:`HPARAMS` and :func:`hp_flags`.
- Out-of-core runs: :func:`caps_available` (capped runs possible here; smoke runs go on
  uncapped where not), :func:`footprint` and :func:`cap_bytes` (``fraction:K`` caps),
  :func:`disk_limits` and :func:`disk_line` (the disk's measured limits, recorded per run).
- Provenance of resumable, multi-part results: :func:`stamp` notes against a part of the
  results the command, the checkout's commit (:func:`git_commit`) and the machine that wrote
  its rows; :func:`provenance` says it in a sentence for the markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "BENCH",
    "GRAPHS",
    "HPARAMS",
    "PY",
    "RESULTS",
    "ROOT",
    "SHARED",
    "SHOAL",
    "WORK",
    "Cgroup",
    "attempt",
    "bench_args",
    "bundled_cora",
    "cap_bytes",
    "caps_available",
    "command_line",
    "dataset_graph",
    "dataset_store",
    "disk_limits",
    "disk_line",
    "epoch_summary",
    "evict",
    "footprint",
    "git_commit",
    "header",
    "hp_flags",
    "load_json",
    "machine",
    "machine_line",
    "median",
    "new_results",
    "out_prefix",
    "outcome",
    "parse_size",
    "parts_header",
    "partitioned_store",
    "provenance",
    "record_command",
    "rel",
    "run_parts",
    "run_capped",
    "run_capped_each",
    "sh",
    "shared_run",
    "shoal",
    "single",
    "stamp",
    "synth_flags",
    "synth_graph",
    "synth_store",
    "train",
    "write_json",
    "write_results",
    "write_text_atomic",
]

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
#: git-ignored data and intermediate files; ``SHOAL_BENCH_WORK`` moves them (the smoke test
#: puts them in its own temporary folder)
WORK = Path(os.environ.get("SHOAL_BENCH_WORK") or BENCH / "work")
RESULTS = BENCH / "results"
SHARED = ROOT.parent / "shared" / "data"
PY = sys.executable
SHOAL = [PY, "-m", "shoal"]


# ----------------------------------------------------------------------------- machine, command
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mem_mib() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def machine(threads: int | None = None) -> dict[str, Any]:
    """The machine a run is on: ``host``, ``cpu`` (model), ``cores``, ``mem_mib``,
    ``platform``, ``python``, ``load_avg_start`` (1, 5, 15 minutes) and, when given,
    ``threads`` (the threads each process of the run uses)."""
    m: dict[str, Any] = {
        "host": platform.node(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "mem_mib": _mem_mib(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_avg_start": [round(x, 2) for x in os.getloadavg()],
    }
    if threads is not None:
        m["threads"] = threads
    return m


def machine_line(m: dict[str, Any] | str | None = None, *, threads: int | None = None) -> str:
    """One line for a results file's ``Machine:``: ``host, cpu, N cores (shared with other
    jobs), M GiB RAM, platform, Python v, load L at start[, T thread(s)]``, of ``m`` (a
    :func:`machine` dict; default: this machine now). A string (a results file written before
    this helper) is returned as it is; a dict from an older version of a script shows the
    keys it has."""
    if isinstance(m, str):
        return m
    if m is None:
        m = machine(threads)
    elif threads is not None:
        m = {**m, "threads": threads}
    parts = [str(v) for v in (m.get("host") or m.get("node"), m.get("cpu")) if v]
    cores = m.get("cores") or m.get("cpus") or m.get("nproc")
    if cores:
        parts.append(f"{cores} cores (shared with other jobs)")
    if m.get("mem_mib"):
        parts.append(f"{m['mem_mib'] / 1024:.0f} GiB RAM")
    if m.get("platform") or m.get("kernel"):
        parts.append(str(m.get("platform") or f"Linux {m['kernel']}"))
    if m.get("python"):
        parts.append(f"Python {m['python']}")
    load = m.get("load_avg_start") or m.get("loadavg_at_start")
    if load:
        parts.append(f"load {float(load[0]):.1f} at start")
    if m.get("threads") is not None:
        parts.append(f"{m['threads']} thread(s)")
    return ", ".join(parts)


def command_line(script: str, argv: Sequence[str] | None = None) -> str:
    """``python bench/<script> ARGS`` (shell-quoted) for ``argv`` (default: this process's
    arguments), the command recorded in a results file."""
    args = sys.argv[1:] if argv is None else argv
    return shlex.join(["python", f"bench/{script}", *map(str, args)])


def record_command(res: dict, part: str, script: str) -> None:
    """Note in ``res`` the command that ran ``part`` of a resumable benchmark
    (``res["commands"][part]``, one entry per part) and this machine (``res["machine"]``)."""
    res.setdefault("commands", {})[part] = command_line(script)
    res["machine"] = machine_line()


def rel(path: str | os.PathLike) -> str:
    """``path`` relative to the checkout when it is inside it (as results files name their
    inputs), else as given."""
    p = Path(path)
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


# ----------------------------------------------------------------------------- results files
def load_json(path: str | os.PathLike, default: Any = None) -> Any:
    """The JSON in ``path``, or ``default`` (``{}`` when None) if there is no file."""
    p = Path(path)
    if p.exists():
        return json.loads(p.read_text())
    return {} if default is None else default


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` (its folder made if missing) through a temporary sibling
    and a rename."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, p)


def write_json(
    path: str | os.PathLike, obj: Any, *, indent: int | None = 1, default: Callable | None = None
) -> None:
    """Write ``obj`` as JSON (and a final newline) to ``path``, atomically."""
    write_text_atomic(path, json.dumps(obj, indent=indent, default=default) + "\n")


# ----------------------------------------------------------------------------- processes
def sh(cmd: Sequence[Any], **kw) -> subprocess.CompletedProcess:
    """Run ``cmd`` capturing its output; on failure raise with the output's tail."""
    cmd = [str(c) for c in cmd]
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return p


def shoal(*args: Any) -> subprocess.CompletedProcess:
    """``python -m shoal ARGS`` through :func:`sh`."""
    return sh([*SHOAL, *args])


def attempt(
    cmd: Sequence[Any],
    *,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
) -> dict:
    """Run ``cmd`` (its own session, so a time-out kills it and every process it started,
    torchrun's workers included) capturing its output; never raises. Returns ``{"command",
    "returncode", "timed_out", "seconds", "stdout", "stderr"}`` (``env``: added to this
    process's environment)."""
    cmd = [str(c) for c in cmd]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
        cwd=cwd,
        env=None if env is None else {**os.environ, **env},
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
    return {
        "command": cmd,
        "returncode": proc.returncode,
        "timed_out": timed_out,
        "seconds": time.perf_counter() - t0,
        "stdout": out or "",
        "stderr": err or "",
    }


_DECORATION = set("=-*_~ ")


def _last_line(text: str) -> str:
    """The last line of ``text`` that says something (not a rule of ``=`` or ``-``)."""
    for line in reversed(text.splitlines()):
        s = line.strip()
        if s and not set(s) <= _DECORATION:
            return s
    return ""


def outcome(returncode: int, stderr: str, *, timed_out: bool = False) -> dict:
    """What a shoal command's exit says: ``{"status", "reason"}``, ``status`` one of

    - ``ok``: exit 0;
    - ``refused``: exit 2 without a traceback (a :class:`shoal.errors.ShoalInputError`,
      printed as ``shoal: error: MESSAGE -> FIX``, or an argparse error such as an unknown
      option); ``reason``: that line from ``error:`` on;
    - ``refused in a worker``: another exit whose output holds a ``ShoalInputError`` raised
      in a rank (torchrun reports it with its traceback, exit 1); ``reason``: its message;
    - ``failed``: any other exit (a crash); ``reason``: ``exit N: `` and its last line;
    - ``timeout``: killed at its time limit; ``reason``: the last line it printed.
    """
    last = _last_line(stderr)
    if timed_out:
        return {"status": "timeout", "reason": f"killed at the time limit; last line: {last}"}
    if returncode == 0:
        return {"status": "ok", "reason": ""}
    if returncode == 2 and "Traceback (most recent call last)" not in stderr:
        said = [ln.strip() for ln in stderr.splitlines() if "error:" in ln]
        line = said[-1] if said else last
        return {"status": "refused", "reason": line[line.find("error:") :] if said else line}
    raised = [ln for ln in stderr.splitlines() if "ShoalInputError: " in ln]
    if raised:
        msg = raised[-1].split("ShoalInputError: ", 1)[1].strip()
        return {"status": "refused in a worker", "reason": f"exit {returncode}: {msg}"}
    return {"status": "failed", "reason": f"exit {returncode}: {last}"}


# ----------------------------------------------------------------------------- smoke mode, --out
def bench_args(ap: argparse.ArgumentParser, *, out: str | None = None) -> argparse.ArgumentParser:
    """Add the options every benchmark has: ``--smoke`` and, when the script writes one
    results file, ``--out PREFIX`` (default ``out``, e.g. ``bench/results/hec``)."""
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run of every part of the script (seconds, on a graph of a few thousand "
        "nodes or the bundled Cora), its results under $SHOAL_BENCH_WORK/smoke (default "
        "bench/work/smoke), never bench/results: what tests/bench runs, so that a change of "
        "shoal's API breaks the test suite rather than the next benchmark",
    )
    if out is not None:
        ap.add_argument(
            "--out",
            default=None,
            help=f"PREFIX of the .md and .json results (default {out}; with --smoke, "
            f"WORK/smoke/{Path(out).name})",
        )
    return ap


def out_prefix(args: argparse.Namespace, default: str) -> Path:
    """Where the results go: ``--out`` when given, else ``default`` (relative to the
    checkout) or, with ``--smoke``, ``WORK/smoke/<its name>``."""
    if getattr(args, "out", None):
        return Path(args.out)
    if getattr(args, "smoke", False):
        return WORK / "smoke" / Path(default).name
    return ROOT / default


# ----------------------------------------------------------------------------- results writer
def new_results(script: str, *, threads: int | None = None, **fields: Any) -> dict:
    """A results dict that names its command (``python bench/<script> ARGS``) and machine."""
    return {"command": command_line(script), "machine": machine_line(threads=threads), **fields}


def header(title: str, res: dict, *paragraphs: str) -> list[str]:
    """The first lines of every results markdown: the title, the machine, the command that
    wrote the file (and every command of a resumable benchmark), then ``paragraphs``."""
    cmds = res.get("commands")
    if isinstance(cmds, dict):
        cmds = list(cmds.values())
    written = f"Written by `{res['command']}`." if res.get("command") else ""
    if cmds:
        written = "Written by " + ", ".join(f"`{c}`" for c in cmds) + "."
    lines = [f"# {title}", "", f"Machine: {machine_line(res.get('machine'))}. {written}".strip()]
    for para in paragraphs:
        lines += ["", para]
    return lines + [""]


def parts_header(title: str, res: dict, *paragraphs: str) -> list[str]:
    """:func:`header` of a multi-part results file: every command that wrote one of its parts
    (``res["parts"]``, :func:`stamp`), once each, in order."""
    cmds = [c for p in res.get("parts", {}).values() for c in p.get("commands", [])]
    info = {"commands": list(dict.fromkeys(cmds)), "machine": res.get("machine")}
    return header(title, info, *paragraphs)


def write_results(prefix: str | os.PathLike, res: dict, render: Callable[[dict], str]) -> None:
    """``prefix.json`` (``res``) and ``prefix.md`` (``render(res)``), both atomically; the
    markdown is rendered first, so a rendering error leaves both files as they were."""
    p = Path(prefix)
    text = render(res)
    write_json(p.with_suffix(".json"), res)
    write_text_atomic(p.with_suffix(".md"), text if text.endswith("\n") else text + "\n")


def median(xs: Sequence[float]) -> float:
    """The median, ``nan`` for no values (a smoke run may time a single epoch)."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


# ----------------------------------------------------------------------------- graphs and stores
#: ``shoal data synth dcsbm`` options of the benchmarks' synthetic graphs, by name. ``smoke``
#: is the tiny graph of every ``--smoke`` run.
GRAPHS: dict[str, dict[str, Any]] = {
    "smoke": {"nodes": 2000, "edges": 16000, "features": 16, "classes": 4},
    "50k": {"nodes": 50000, "edges": 500000, "features": 64},
    "200k": {"nodes": 200000, "edges": 1000000, "features": 128, "classes": 47, "seed": 0},
    # bench/disagg.py's larger graph: 20,000 training nodes, as 200k's
    "1m": {"nodes": 1000000, "edges": 5000000, "features": 128, "classes": 47, "train-frac": 0.02},
    "2m": {
        "nodes": 2000000,
        "edges": 10000000,
        "features": 256,
        "classes": 16,
        "train-frac": 0.02,
        "val-frac": 0.005,
    },
    "10m": {  # issue 11's
        "nodes": 10000000,
        "edges": 50000000,
        "features": 128,
        "classes": 16,
        "train-frac": 0.01,
        "val-frac": 0.002,
    },
}


def synth_flags(spec: dict[str, Any]) -> list[str]:
    """``{"nodes": 2000, "train-frac": 0.02}`` -> ``["--nodes", "2000", "--train-frac", "0.02"]``."""
    return [a for k, v in spec.items() for a in (f"--{k}", str(v))]


def synth_graph(name: str, *, work: Path | None = None, **overrides: Any) -> Path:
    """``work/graphs/<name>`` (default ``WORK``): the DC-SBM graph :data:`GRAPHS` ``[name]``
    (``overrides`` replace its options, e.g. ``features=0``), generated once."""
    spec = {**GRAPHS[name], **{k.replace("_", "-"): v for k, v in overrides.items()}}
    g = (work or WORK) / "graphs" / name
    if not (g / "meta.json").exists():
        shoal("data", "synth", "dcsbm", *synth_flags(spec), "--out", g, "--overwrite", "-q")
    return g


def partitioned_store(
    graph: Path,
    parts: int,
    *,
    algo: str = "ldg",
    halo_features: bool = True,
    work: Path | None = None,
    store_args: Sequence[Any] = (),
) -> Path:
    """The store of ``graph`` in ``parts`` parts by ``algo`` (``--halo-features`` unless
    ``halo_features=False``; ``store_args``: further ``shoal store build`` options), built
    once beside the graph (or in ``work``): ``<graph>-<algo><parts>`` and
    ``<graph>-<algo><parts>-store[-nohalo][-<store_args>]``."""
    base = (work or graph.parent) / f"{graph.name}-{algo}{parts}"
    suffix = "" if halo_features else "-nohalo"
    suffix += "".join("-" + str(a).lstrip("-") for a in store_args)
    a, s = base, base.with_name(base.name + "-store" + suffix)
    if not (a / "meta.json").exists():
        shoal("partition", graph, "--algo", algo, "--parts", parts, "--out", a, "--overwrite", "-q")
    if not (s / "meta.json").exists():
        halo = ["--halo-features"] if halo_features else []
        shoal("store", "build", graph, a, "--out", s, *halo, *store_args, "--overwrite", "-q")
    return s


def synth_store(work: Path, parts: int, *, graph: str = "50k", algo: str = "ldg") -> Path:
    """A store of :func:`synth_graph` ``(graph)`` in ``parts`` parts (``algo``) with halo
    features, all built once under ``work`` (the fault benchmarks' 50k-node graph by
    default)."""
    return partitioned_store(synth_graph(graph, work=work), parts, algo=algo)


def bundled_cora() -> Path:
    """The Cora ``graph.npz`` that ships with shoal (``shoal demo``'s), for smoke runs."""
    from importlib import resources

    return Path(str(resources.files("shoal.data") / "datasets" / "cora" / "graph.npz"))


def dataset_graph(name: str, *, work: Path | None = None) -> Path:
    """``work/datasets/<name>`` (default ``WORK``): the shared dataset ``../shared/data/<name>``
    imported once; Cora falls back to shoal's bundled copy where ``../shared`` is absent."""
    src = SHARED / name / "graph.npz"
    if not src.exists() and name == "cora":
        src = bundled_cora()
    if not src.exists():
        raise SystemExit(f"dataset {name!r}: {src} not found (the shared datasets are absent)")
    g = (work or WORK) / "datasets" / name
    if not (g / "meta.json").exists():
        shoal("data", "import", src, "--out", g, "--overwrite", "-q")
    return g


def dataset_store(name: str, parts: int, *, algo: str = "spring", **kw: Any) -> tuple[Path, Path]:
    """(graph, store) of a shared dataset in ``parts`` parts (SPRING, halo features by
    default: the distributed benchmarks' stores), built once."""
    g = dataset_graph(name)
    return g, partitioned_store(g, parts, algo=algo, **kw)


# ----------------------------------------------------------------------------- training runs
#: Hyper-parameters per shared dataset, the same for the single-process trainer and every
#: engine of the distributed benchmarks (``hp_flags`` turns them into ``shoal train`` flags).
HPARAMS: dict[str, dict[str, Any]] = {
    "cora": dict(
        model="gcn",
        fanouts="-1,-1",
        hidden=64,
        lr=0.01,
        weight_decay=5e-4,
        dropout=0.5,
        batch_size=1024,
        epochs=100,
        normalize_features=True,
    ),
    "amazon_photo": dict(
        model="sage",
        fanouts="10,5",
        hidden=64,
        lr=0.005,
        weight_decay=0.0,
        dropout=0.5,
        batch_size=1024,
        epochs=100,
        normalize_features=False,
    ),
    "coauthor_physics": dict(
        model="sage",
        fanouts="10,5",
        hidden=64,
        lr=0.005,
        weight_decay=0.0,
        dropout=0.5,
        batch_size=1024,
        epochs=60,
        normalize_features=False,
    ),
}


def hp_flags(hp: dict, seed: int, *, eval_every: int = 5) -> list[str]:
    """``shoal train`` flags of a :data:`HPARAMS` entry and a seed (no progress bars)."""
    f = [f"--fanouts={hp['fanouts']}"]
    for key in ("model", "hidden", "lr", "weight_decay", "dropout", "batch_size", "epochs"):
        f += [f"--{key.replace('_', '-')}", str(hp[key])]
    f += ["--seed", str(seed), "--eval-every", str(eval_every), "--no-progress"]
    f.append("--normalize-features" if hp["normalize_features"] else "--no-normalize-features")
    return f


def train(*args: Any, out: Path, env: dict[str, str] | None = None) -> dict:
    """``python -m shoal train ARGS --json OUT`` (``--nproc N`` among ``args`` launches the
    ranks through torch.distributed.run, as a user would); returns the run's JSON: its
    ``history`` holds every epoch's seconds, time split and communication."""
    out.parent.mkdir(parents=True, exist_ok=True)
    sh([*SHOAL, "train", *args, "--json", out], env=None if env is None else {**os.environ, **env})
    return json.loads(Path(out).read_text())


def single(g: Path, hp: dict, seed: int, *, out: Path) -> dict:
    """The single-process trainer on graph ``g`` with :data:`HPARAMS`-style ``hp``, one
    thread: ``{"test_accuracy", "seconds_per_epoch"}``."""
    r = train("--graph", g, *hp_flags(hp, seed), "--threads", 1, out=out)
    return {"test_accuracy": r["test_accuracy"], "seconds_per_epoch": r["seconds_per_epoch"]}


def epoch_summary(run: dict, *, skip_first: bool = True) -> dict:
    """Median epoch of a :func:`train` result (the first epoch left out when there are
    others: it holds numba's compilation and the caches' warm-up), the median of each phase
    of the time split, and the mean communication per epoch."""
    hist = run.get("history") or []
    keep = hist[1:] if skip_first and len(hist) > 1 else hist
    phases = sorted({k for h in keep for k in (h.get("time_split") or {})})
    return {
        "epochs_timed": len(keep),
        "median_epoch_seconds": median([h["seconds"] for h in keep if "seconds" in h]),
        "time_split": {
            p: median([(h.get("time_split") or {}).get(p, 0.0) for h in keep]) for p in phases
        },
        "comm_per_epoch": run.get("comm_per_epoch", {}),
    }


# ----------------------------------------------------------------------------- memory caps
CGROUP_BASE = Path("/sys/fs/cgroup/memory")


def parse_size(text: str) -> int:
    """``"4GiB"``, ``"4G"``, ``"512MB"``, ``"1000"`` -> bytes (K/M/G/T are powers of 1024)."""
    t = text.strip().upper().replace("IB", "").replace("B", "")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if t and t[-1] in mult:
        return int(float(t[:-1]) * mult[t[-1]])
    return int(float(t))


def evict(path: str | os.PathLike) -> None:
    """Drop the page cache of every file under ``path`` (or of ``path`` itself), so a run
    starts cold and its file pages are charged to its own group. Only these files are
    touched (``posix_fadvise(DONTNEED)``)."""
    p = Path(path)
    files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file())
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class Cgroup:
    """A cgroup-v1 memory group, child of this process's own memory cgroup, capped at
    ``limit`` bytes (memory and, where the kernel accounts it, memory + swap)."""

    def __init__(self, name: str, limit: int):
        own = "/"
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrl, path = line.split(":", 2)
            if "memory" in ctrl.split(","):
                own = path
        self.path = CGROUP_BASE / own.lstrip("/") / name
        self.limit = int(limit)

    def __enter__(self) -> Cgroup:
        if not CGROUP_BASE.is_dir():
            raise RuntimeError(f"cgroup v1 memory controller not mounted at {CGROUP_BASE}")
        if self.path.exists():
            self.path.rmdir()
        self.path.mkdir()
        try:
            (self.path / "memory.limit_in_bytes").write_text(str(self.limit))
            memsw = self.path / "memory.memsw.limit_in_bytes"
            if memsw.exists():
                memsw.write_text(str(self.limit))
            self.limit = int((self.path / "memory.limit_in_bytes").read_text())  # page-rounded
        except BaseException:
            self.path.rmdir()
            raise
        return self

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def stat(self) -> dict[str, int]:
        """``memory.stat`` of the group (bytes: ``rss``, ``cache``, ``dirty``, ...)."""
        try:
            text = (self.path / "memory.stat").read_text()
        except OSError:
            return {}
        return {k: int(v) for k, v in (ln.split() for ln in text.splitlines() if ln.strip())}

    def read(self) -> dict:
        def get(name: str) -> str:
            try:
                return (self.path / name).read_text()
            except OSError:
                return ""

        oom = dict(ln.split() for ln in get("memory.oom_control").splitlines() if ln.strip())
        return {
            "cgroup": str(self.path),
            "limit": self.limit,
            "max_usage": int(get("memory.max_usage_in_bytes") or 0),
            "failcnt": int(get("memory.failcnt") or 0),
            "oom_kill": int(oom.get("oom_kill", -1)),
            "under_oom": int(oom.get("under_oom", -1)),
        }

    def __exit__(self, *exc: object) -> None:
        for i in range(100):  # wait until every process has left, then remove
            left = (self.path / "cgroup.procs").read_text().split()
            if not left:
                break
            if i == 50:  # stragglers (only processes started inside the group are here)
                for pid in left:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            time.sleep(0.2)
        try:
            self.path.rmdir()
        except OSError as e:
            print(f"warning: could not remove {self.path}: {e}", file=sys.stderr)


def _peak_zero() -> dict[str, int]:
    return {"rss": 0, "cache": 0, "dirty": 0, "rss+cache": 0}


def _track_peak(peak: dict[str, int], st: dict[str, int]) -> None:
    for k in ("rss", "cache", "dirty"):
        peak[k] = max(peak[k], st.get(k, 0))
    peak["rss+cache"] = max(peak["rss+cache"], st.get("rss", 0) + st.get("cache", 0))


def _enter_group(path: Path | None) -> Callable[[], None]:
    def enter() -> None:  # runs in the child before exec
        os.setsid()
        if path is not None:
            (path / "cgroup.procs").write_text(str(os.getpid()))

    return enter


def _result(cmd, status, ru, secs: float, timed_out: bool) -> dict:
    return {
        "command": [str(c) for c in cmd],
        "seconds": secs,
        "returncode": os.waitstatus_to_exitcode(status),
        "timed_out": timed_out,
        "read_bytes": ru.ru_inblock * 512,
        "write_bytes": ru.ru_oublock * 512,
        "maxrss_bytes": ru.ru_maxrss * 1024,
    }


def run_capped(
    cmd: list[str],
    limit: int | None,
    *,
    name: str = "shoal_bench",
    timeout: float | None = None,
    evict_paths: Sequence[str | os.PathLike] = (),
    **popen_kw,
) -> dict:
    """Run ``cmd`` in a fresh group capped at ``limit`` bytes (None: no group, no cap) and
    return ``{"command", "seconds", "returncode", "timed_out", "read_bytes", "write_bytes",
    "maxrss_bytes", "cgroup": {..., "peak_sampled"}}`` (the disk bytes and max RSS of the
    child and its descendants, from ``wait4``; the group's rss/cache/dirty sampled every
    0.1 s). On timeout the whole process group is killed."""
    for p in evict_paths:
        evict(p)
    cg = Cgroup(name, limit) if limit else None
    if cg is not None:
        cg.__enter__()
    try:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, preexec_fn=_enter_group(cg.path if cg else None), **popen_kw)
        timed_out = False
        deadline = None if timeout is None else t0 + timeout
        peak = _peak_zero()
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if cg is not None:
                _track_peak(peak, cg.stat())
            if deadline is not None and time.perf_counter() > deadline:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.1)
        res = _result(cmd, status, ru, time.perf_counter() - t0, timed_out)
        proc.returncode = res["returncode"]
        if cg is not None:
            res["cgroup"] = {**cg.read(), "peak_sampled": peak}
        return res
    finally:
        if cg is not None:
            cg.__exit__(None, None, None)


def run_capped_each(
    cmds: list[tuple[list[str], dict]],
    limit: int | None,
    *,
    name: str = "shoal_bench",
    timeout: float | None = None,
    evict_paths: Sequence[str | os.PathLike] = (),
    **popen_kw,
) -> list[dict]:
    """Run the commands ``(argv, extra environment)`` at once, each in its own group capped
    at ``limit`` bytes (None: uncapped), e.g. the ranks of a distributed run, each with its
    own cap. When one exits non-zero the others are killed. Returns one result per command,
    as :func:`run_capped` (plus ``env``)."""
    for p in evict_paths:
        evict(p)
    groups = [Cgroup(f"{name}_{i}", limit) if limit else None for i in range(len(cmds))]
    for g in groups:
        if g is not None:
            g.__enter__()
    procs: list = []
    try:
        t0 = time.perf_counter()
        for (cmd, env), g in zip(cmds, groups, strict=True):
            enter = _enter_group(g.path if g is not None else None)
            procs.append(
                subprocess.Popen(cmd, preexec_fn=enter, env={**os.environ, **env}, **popen_kw)
            )
        done: dict[int, tuple] = {}
        peaks = [_peak_zero() for _ in cmds]
        timed_out = False
        while len(done) < len(procs):
            for i, proc in enumerate(procs):
                if i in done:
                    continue
                pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    done[i] = (status, ru, time.perf_counter() - t0)
                    if os.waitstatus_to_exitcode(status) != 0:
                        for j, q in enumerate(procs):  # a failed rank: stop the others
                            if j not in done:
                                os.killpg(q.pid, signal.SIGKILL)
            for i, g in enumerate(groups):
                _track_peak(peaks[i], g.stat() if g is not None and i not in done else {})
            if timeout is not None and time.perf_counter() - t0 > timeout and not timed_out:
                timed_out = True
                for j, q in enumerate(procs):
                    if j not in done:
                        os.killpg(q.pid, signal.SIGKILL)
            time.sleep(0.1)
        out = []
        for i, (cmd, env) in enumerate(cmds):
            status, ru, secs = done[i]
            res = _result(cmd, status, ru, secs, timed_out)
            res = {"command": res.pop("command"), "env": env, **res}
            if groups[i] is not None:
                res["cgroup"] = {**groups[i].read(), "peak_sampled": peaks[i]}
            out.append(res)
        return out
    finally:
        for g in groups:
            if g is not None:
                g.__exit__(None, None, None)


# ----------------------------------------------------------------------------- out-of-core runs
def caps_available(smoke: bool) -> bool:
    """Whether memory-capped runs can be made here (root, cgroup v1's memory controller at
    :data:`CGROUP_BASE`). Where not, a smoke run goes on uncapped with a warning, and a full
    run stops: its capped numbers would mean nothing."""
    if os.geteuid() == 0 and CGROUP_BASE.is_dir():
        return True
    why = f"memory-capped runs need root and cgroup v1 mounted at {CGROUP_BASE}"
    if not smoke:
        raise SystemExit(why)
    print(f"warning: {why}: the smoke run's capped runs run uncapped", file=sys.stderr)
    return False


def footprint(run: dict | None) -> int | None:
    """The process footprint a ``shoal train --json`` run (``run``, its JSON) measured, held
    whatever the budget: its memory plan's reserve (interpreter, libraries, model, one
    batch's working memory) and the structure's row index; None without a memory plan."""
    plan = ((run or {}).get("config") or {}).get("memory_plan") or {}
    if "reserve" not in plan:
        return None
    return int(plan["reserve"]) + int(plan.get("index_bytes") or 0)


def cap_bytes(spec: str, features: int, base: dict | None) -> int:
    """A memory cap in bytes: a size (``1.5GiB``), or ``fraction:K``: a K-th of ``features``
    bytes plus the :func:`footprint` the uncapped run ``base`` (its JSON) measured."""
    if not spec.startswith("fraction:"):
        return parse_size(spec)
    fp = footprint(base)
    if fp is None:
        raise SystemExit(f"cap {spec} needs the uncapped run's memory plan")
    return int(features / float(spec.split(":", 1)[1])) + fp


def disk_limits() -> dict:
    """This machine's disk as ``bench/disk.py`` measured it (``bench/results/disk.json``;
    ``{}`` before it ran), recorded with each out-of-core run."""
    return load_json(RESULTS / "disk.json")


def disk_line(disk: dict, *, shared: str = "") -> str:
    """The disk's limits (a :func:`disk_limits` record) in one sentence; ``shared``: e.g.
    ``", shared by both ranks"``."""
    seq = disk.get("sequential_bytes_per_s")
    if not seq:
        return "Disk limits: not measured (`python bench/disk.py`)."
    rnd = ", ".join(
        f"{v['bytes_per_s'] / 1e6:.0f} MB/s at queue depth {k}"
        for k, v in (disk.get("random_4k") or {}).items()
    )
    return (
        f"Disk (`{disk.get('command', 'python bench/disk.py')}`){shared}: sequential reads "
        f"{seq / 1e9:.2f} GB/s; random 4 KiB direct reads {rnd}."
    )


# ----------------------------------------------------------------------------- provenance
def git_commit(*paths: str) -> str:
    """The checkout's short commit, with ``+changes`` when ``paths`` (default ``src`` and
    ``bench``) differ from it; ``unknown`` outside a git checkout."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--", *(paths or ("src", "bench"))],
        capture_output=True,
        text=True,
    )
    return (head.stdout.strip() or "unknown") + ("+changes" if dirty.stdout.strip() else "")


#: under ``--smoke``: runs by their key (their command line), so that a script's parts
#: asking for the same run share it (:func:`run_parts` sets it, :func:`shared_run` uses it)
_SHARED: dict[tuple, Any] | None = None


def shared_run(key: tuple, make: Callable[[], Any]) -> Any:
    """``make()``, made once per ``key`` in a ``--smoke`` invocation of :func:`run_parts`
    (every time otherwise)."""
    if _SHARED is None:
        return make()
    if key not in _SHARED:
        _SHARED[key] = make()
    return _SHARED[key]


def run_parts(
    ap: argparse.ArgumentParser,
    args: argparse.Namespace,
    parts: dict[str, Callable[..., None]],
    smoke: dict[str, dict[str, Any]],
    *call: Any,
    **attrs: Any,
) -> None:
    """Run the part ``args.cmd`` names or, with none under ``--smoke``, every part in turn
    (its own options parsed from the command line); under ``--smoke`` each part's options are
    replaced by ``smoke[part]`` and runs with the same key are made once
    (:func:`shared_run`). Each part is called as ``parts[part](options, *call)``, the options
    carrying ``attrs`` too."""
    global _SHARED
    _SHARED = {} if args.smoke else None
    for part in [args.cmd] if args.cmd else list(parts):
        if part not in parts:  # report
            continue
        pa = args if args.cmd else ap.parse_args([*sys.argv[1:], part])
        if args.smoke:
            vars(pa).update(smoke[part])
        vars(pa).update(attrs)
        parts[part](pa, *call)


def stamp(res: dict, part: str, script: str, *, fresh: bool = False, threads: int | None = 1):
    """Note in ``res["parts"][part]`` this invocation's command (``python bench/<script>
    ARGS``), the checkout's commit (src and the script) and the machine, as the writer of that
    part's rows: appended to the part's earlier ones (a resumed part), or replacing them
    (``fresh``: this invocation rewrites the part). ``res["machine"]`` becomes this machine."""
    parts = res.setdefault("parts", {})
    p = parts[part] = {} if fresh else parts.get(part, {})
    for key, val in (
        ("commands", command_line(script)),
        ("commits", git_commit("src", f"bench/{script}", "bench/common.py")),
    ):
        if val not in p.setdefault(key, []):
            p[key].append(val)
    res["machine"] = p["machine"] = machine_line(threads=threads)


def provenance(res: dict, part: str) -> str:
    """``part``'s commands, commits and machine in a sentence. Rows measured before their
    script noted its commit carry ``recorded_in``: the commits that added them to the results
    (reconstructed from git history)."""
    p = res["parts"][part]
    when = [f"at commit {', '.join(p['commits'])}"] if p.get("commits") else []
    if p.get("recorded_in"):
        when.append(f"by the script of the time, recorded in {', '.join(p['recorded_in'])}")
    cmds = ", ".join(f"`{c}`" for c in p["commands"])
    return f"{cmds} {' and '.join(when)}, on {p['machine']}."
