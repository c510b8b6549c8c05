"""A network link cut between two machines (issue 36), on two simulated machines.

Two network namespaces (``shoal-a``, ``shoal-b``), each with its own hostname (a UTS
namespace), joined by a virtual link (a veth pair, 10.77.0.1 <-> 10.77.0.2); the store on the
shared file system. Each machine runs the README's cluster command, one process per machine::

    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 10.77.0.1:29400
        --rdzv-id ID [RDZV] -m shoal train --store STORE --engine minibatch --dist-timeout T ...

Scenarios (each a fresh rendezvous id), the link cut when rank 0 has finished epoch 2:

- ``clean``: no fault; the accuracy every other scenario is compared with.
- ``cut``: the link stays down. Both machines' commands must end within ``T + 30`` seconds of
  the cut, each printing one line that names the peer it lost.
- ``restored``: the link comes back ``--outage`` seconds later (within ``T``), with
  ``--max-restarts 3 --checkpoint-dir DIR --resume``: the run must finish, with the clean
  run's accuracy.
- ``elastic``: ``--nnodes 1:2`` with the restart options, and machine b is lost instead (every
  process in its namespace SIGKILLed): machine a's launcher must restart its worker on a world
  of one, which resumes the 2-process checkpoint and finishes.

Needs root (``ip netns``, ``unshare``). Graph: ``common.GRAPHS["50k"]`` (``shoal data synth
dcsbm --nodes 50000 --edges 500000 --features 64``) in 2 parts (ldg) with halo features.

Usage: ``python bench/faults.py [--scenarios clean,cut,restored,elastic] [--dist-timeout 60]
[--outage 5] [--epochs 12] [--out bench/results/faults]``; ``--smoke``: the ``clean`` scenario
on the smoke graph, 2 epochs (the namespaces, the link, both machines' rendezvous and
training; without root it writes a results file that says it was skipped).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import common
from common import PY, sh

NAME = "bench/results/faults"
SCENARIOS = ("clean", "cut", "restored", "elastic")
SMOKE = "--graph smoke --scenarios clean --epochs 2"

NS = ("shoal-a", "shoal-b")
ADDR = ("10.77.0.1", "10.77.0.2")
VETH = ("shoal-va", "shoal-vb")
PORT = 29400
#: what every machine's launcher is given so that it gives up in bounded time when the
#: rendezvous host is gone (torch's c10d rendezvous: store reads, joining, closing)
RDZV_CONF = "read_timeout=20,join_timeout=60,close_timeout=10"
#: retransmissions before the kernel gives up on a TCP connection (per network namespace)
TCP_RETRIES2 = 5


def _ip(*args: str) -> None:
    sh(["ip", *args])


def network_up() -> None:
    """The namespaces, the link and, in each, an ``/etc/hosts`` naming both machines (``ip
    netns exec`` mounts ``/etc/netns/NS/hosts`` over ``/etc/hosts``)."""
    network_down()
    names = "".join(f"{addr} machine-{'ab'[m]}\n" for m, addr in enumerate(ADDR))
    for ns in NS:
        _ip("netns", "add", ns)
        etc = Path("/etc/netns") / ns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text("127.0.0.1 localhost\n" + names)
    _ip("link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1])
    for ns, veth, addr in zip(NS, VETH, ADDR, strict=True):
        _ip("link", "set", veth, "netns", ns)
        _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", veth)
        _ip("-n", ns, "link", "set", veth, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        # as a cluster's machines should be set (docs/distributed.md, "A lost peer"): a TCP
        # connection whose peer is gone fails after about 25 s of unanswered retransmissions
        # (Linux's default, 15, waits about 15 minutes, and torchrun's agent blocks on it)
        sh(["ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.tcp_retries2={TCP_RETRIES2}"])


def network_down() -> None:
    for ns in NS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        hosts = Path("/etc/netns") / ns / "hosts"
        hosts.unlink(missing_ok=True)
        if hosts.parent.exists():
            hosts.parent.rmdir()


def lose_machine(machine: int) -> None:
    """SIGKILL every process of a machine (its namespace): the machine is gone."""
    pids = sh(["ip", "netns", "pids", NS[machine]]).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), 9)
        except ProcessLookupError:
            pass


def link(up: bool) -> None:
    _ip("-n", NS[0], "link", "set", VETH[0], "up" if up else "down")


def start(machine: int, run_id: str, store: Path, work: Path, a, extra: list[str], nnodes: str):
    """One machine's torchrun (in its namespace, under its own hostname)."""
    rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{ADDR[0]}:{PORT}"]
    rdzv += ["--rdzv-id", run_id, "--rdzv-conf", RDZV_CONF]
    restarts = ["--max-restarts", "3"] if "--resume" in extra else []
    train = ["-m", "shoal", "train", "--store", str(store), "--engine", "minibatch"]
    train += ["--model", "sage", "--fanouts", "10,5", "--hidden", "64", "--epochs", a.epochs]
    train += ["--batch-size", "512", "--dist-timeout", a.dist_timeout, "--no-progress"]
    train += ["--metrics-file", work / f"{run_id}.jsonl", "--json", work / f"{run_id}.json"]
    launcher = [PY, "-m", "torch.distributed.run", "--nnodes", nnodes, "--nproc-per-node", "1"]
    cmd = [*launcher, *rdzv, *restarts, *map(str, train), *extra]
    host = f"machine-{'ab'[machine]}"
    shell = f"hostname {host} && exec {' '.join(map(str, cmd))}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    return subprocess.Popen(
        ["ip", "netns", "exec", NS[machine], "unshare", "--uts", "sh", "-c", shell],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=work,
    )


def scenario(name: str, store: Path, work: Path, a) -> dict:
    run_id = f"faults-{name}-{int(time.time())}"
    extra = ["--checkpoint-dir", str(work / f"ckpt-{run_id}"), "--resume"]
    extra = extra if name in ("restored", "elastic") else []
    nnodes = "1:2" if name == "elastic" else "2"
    link(True)
    t0 = time.monotonic()
    procs = [start(m, run_id, store, work, a, extra, nnodes) for m in (0, 1)]
    metrics = work / f"{run_id}.jsonl"
    cut = restored = None
    ends: list[float | None] = [None, None]
    limit = t0 + 900
    while any(e is None for e in ends) and time.monotonic() < limit:
        now = time.monotonic()
        if name != "clean" and cut is None and metrics.exists():
            if metrics.read_text().count("\n") >= 2:
                if name == "elastic":
                    lose_machine(1)
                else:
                    link(False)
                cut = now
        if name == "restored" and cut is not None and restored is None:
            if now - cut >= a.outage:
                link(True)
                restored = now
        for m, p in enumerate(procs):
            if ends[m] is None and p.poll() is not None:
                ends[m] = now
        time.sleep(0.2)
    for p in procs:
        if p.poll() is None:
            p.kill()
    errs = [p.stderr.read() for p in procs]
    link(True)
    out = work / f"{run_id}.json"
    result = json.loads(out.read_text()) if out.exists() else {}
    last = work / f"ckpt-{run_id}" / "last.json"
    world_at_end = json.loads(last.read_text())["world_size"] if last.exists() else None
    row = {
        "scenario": name,
        "exit_codes": [p.returncode for p in procs],
        "cut_after_s": None if cut is None else round(cut - t0, 1),
        "outage_s": None if restored is None else round(restored - cut, 1),
        "ended_after_cut_s": [
            None if e is None or cut is None else round(e - cut, 1) for e in ends
        ],
        "seconds": [None if e is None else round(e - t0, 1) for e in ends],
        "test_accuracy": result.get("test_accuracy"),
        "world_size_at_end": world_at_end or result.get("world_size"),
        "epochs": result.get("epochs"),
        "lost_peer_lines": [
            [x for x in err.splitlines() if "lost " in x or "no answer from the rendezvous" in x]
            for err in errs
        ],
        "stderr_tail": [err[-1500:] for err in errs],
    }
    print(json.dumps({k: v for k, v in row.items() if k != "stderr_tail"}), flush=True)
    return row


def main() -> int:
    ap = common.bench_args(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]), out=NAME)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--graph", default="50k", choices=sorted(common.GRAPHS))
    ap.add_argument("--dist-timeout", type=int, default=60)
    ap.add_argument("--outage", type=float, default=5.0)
    ap.add_argument("--epochs", type=int, default=12)
    a = ap.parse_args()
    if a.smoke:
        a = ap.parse_args(["--smoke", *SMOKE.split()])
    res = common.new_results("faults.py", graph=a.graph, synth=common.GRAPHS[a.graph])
    res.update(dist_timeout=a.dist_timeout, rdzv_conf=RDZV_CONF, tcp_retries2=TCP_RETRIES2)
    if os.geteuid() != 0:
        print("bench/faults.py needs root (network namespaces)", file=sys.stderr)
        if not a.smoke:
            return 2
        res["skipped"] = "not root: no network namespaces"
        res["rows"] = []
    else:
        work = common.WORK / "faults"
        work.mkdir(parents=True, exist_ok=True)
        store = common.partitioned_store(common.synth_graph(a.graph), 2)
        network_up()
        try:
            res["rows"] = [scenario(n, store, work, a) for n in a.scenarios.split(",")]
        finally:
            network_down()
    common.write_results(common.out_prefix(a, NAME), res, render)
    return 0


def render(res: dict) -> str:
    lines = common.header(
        "Faults between two machines: a cut link (issue 36)",
        res,
        "Two network namespaces with their own hostnames joined by a veth pair; one `torchrun` "
        "per machine (`--nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-conf "
        f"{res['rdzv_conf']}`), `shoal train --engine minibatch --dist-timeout "
        f"{res['dist_timeout']}` on the synthetic graph `{res['graph']}` (`shoal data synth dcsbm "
        f"{' '.join(common.synth_flags(res['synth']))}`) in 2 parts, each machine with "
        f"`net.ipv4.tcp_retries2={res['tcp_retries2']}`. The link is cut once rank 0 has "
        "finished epoch 2.",
        *([f"Skipped: {res['skipped']}."] if res.get("skipped") else []),
    )
    lines += [
        "| scenario | exit codes (a, b) | fault after | outage | ended after the fault (a, b) "
        "| test accuracy | processes at the end | what each machine printed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        said = "<br>".join(
            f"{'ab'[m]}: `{(ls[0] if ls else '-')[:240]}`"
            for m, ls in enumerate(r["lost_peer_lines"])
        )
        ends = ", ".join("-" if e is None else f"{e:g} s" for e in r["ended_after_cut_s"])
        acc = "-" if r["test_accuracy"] is None else f"{r['test_accuracy']:.4f}"
        cut = "-" if r["cut_after_s"] is None else f"{r['cut_after_s']:g} s"
        outage = "-" if r["outage_s"] is None else f"{r['outage_s']:g} s"
        world = r.get("world_size_at_end") or "-"
        lines.append(
            f"| {r['scenario']} | {r['exit_codes']} | {cut} | {outage} | {ends} | {acc} | "
            f"{world} | {said} |"
        )
    lines += ["", "The tails of each machine's standard error are in the JSON.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
