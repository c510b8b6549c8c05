"""Starting distributed training: one :class:`LaunchSpec` -> N worker processes -> one result.

``shoal train --store STORE --engine NAME --nproc N`` fills a spec and calls :func:`run`. With
``nproc > 1`` (outside torchrun) :func:`run` hands the spec to :mod:`shoal.launcher` (a free
rendezvous port, N workers with torchrun's environment, all stopped if one fails,
``--max-restarts``; standard library only, in place of the CLI's process) on this module,
which runs :func:`worker` from the spec file. Under
torchrun (``RANK``/``WORLD_SIZE`` set) :func:`run` is the worker itself
(docs/distributed.md#a-cluster-torchrun-on-every-machine). Each worker opens the process group
(:func:`shoal.distributed.process_group`, always gloo), builds the engine, trains, and rank 0
prints the summary and writes ``json``; a failing rank makes the run exit non-zero with its
traceback. Tests inject faults through :attr:`LaunchSpec.hooks`; the CLI has no such flags.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import record

from shoal.engines.config import read_config
from shoal.errors import ShoalDiskFullError, ShoalInputError, ShoalPeerLostError
from shoal.training import TrainConfig
from shoal.utils.device import resolve_device
from shoal.utils.io import write_json_output

__all__ = ["LaunchSpec", "main", "run", "worker"]


@dataclass(kw_only=True)
class LaunchSpec:
    """Everything a distributed run needs (JSON-serialisable, handed to every worker).

    Attributes:
        store: the partitioned store to train on (required).
        train: the run's configuration, the engine's included (``train.engine``: its name,
            nproc, plan, dist_timeout, max_restarts and its own options; default
            ``TrainConfig()``).
        json: rank 0 writes the result there ('-' = stdout; default None).
        command: the command line recorded in the result (default ``sys.argv``).
        hooks: ``"module:function"`` names called as ``fn(engine, ctx)`` in every worker after
            the engine is built (tests inject failures this way; default none).
    """

    store: str
    train: TrainConfig = field(default_factory=TrainConfig)
    json: str | None = None
    command: list[str] | None = None
    hooks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.store:
            raise ShoalInputError(
                "--store is required", fix="give a store built by `shoal store build`"
            )
        self.store = str(self.store)
        self.hooks = tuple(self.hooks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "train": self.train.to_dict(),
            "json": self.json,
            "command": self.command if self.command is not None else list(sys.argv),
            "hooks": list(self.hooks),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LaunchSpec:
        return cls(
            store=d["store"],
            train=read_config(d["train"], origin="launch spec"),
            json=d.get("json"),
            command=d.get("command"),
            hooks=tuple(d.get("hooks") or ()),
        )


def _summary(d: dict[str, Any]) -> str:
    c = d["comm_per_epoch"]
    m = d.get("metric", "accuracy")
    return (
        f"{d['engine']} on {d['world_size']} process(es), {d['num_parts']} parts: "
        f"test {m} {d[f'test_{m}']:.4f}, val {d[f'val_{m}']:.4f} "
        f"(best epoch {d['best_epoch']}/{d['epochs']}), {d['seconds_per_epoch']:.3f} s/epoch, "
        f"{c.get('bytes_sent', 0) / 1e6:.2f} MB sent + {c.get('allreduce_bytes', 0) / 1e6:.2f} MB "
        f"all-reduced per epoch, remote feature fraction {c.get('remote_feature_fraction', 0):.3f}"
    )


def _call_hooks(spec: LaunchSpec, engine: Any, ctx: Any) -> None:
    for name in spec.hooks:
        module, func = name.split(":")
        getattr(importlib.import_module(module), func)(engine, ctx)


def _auto_engine(store: Any, tc: TrainConfig, ctx: Any) -> tuple[TrainConfig, dict[str, Any]]:
    """``--engine auto``: every rank probes at once (the exchange between ranks 0 and 1 and
    an all-reduce included), rank 0 chooses (:mod:`shoal.engines.autoplan`) and every rank
    gets its choice."""
    import torch.distributed as dist

    from shoal.engines.autoplan import plan_engine
    from shoal.engines.config import resolve_auto
    from shoal.engines.registry import supporting

    if tc.task != "node":
        raise ShoalInputError(
            "--engine auto plans node classification only",
            fix=f"give --engine {' or '.join(supporting(tc.task))} for --task {tc.task}",
        )
    box: list[Any] = [None]
    plan = plan_engine(store, tc, ctx.world_size, ctx=ctx if ctx.world_size > 1 else None)
    if ctx.rank == 0:
        box[0] = plan.to_dict()
        print(
            "shoal train --engine auto: estimated training epoch per engine on this "
            f"machine ({ctx.world_size} processes):\n  " + "\n  ".join(plan.reasons()),
            file=sys.stderr,
            flush=True,
        )
    if ctx.world_size > 1:
        dist.broadcast_object_list(box, 0)
    return resolve_auto(tc, box[0]["engine"]), box[0]


def worker(spec: LaunchSpec) -> int:
    """One rank: open the group, train, report (rank 0). Returns the exit code."""

    from shoal.distributed import DistConfig, process_group
    from shoal.distributed.runtime import local_peers
    from shoal.engines.registry import get_engine
    from shoal.store import Store
    from shoal.utils.threads import set_threads, threads_per_process

    tc = spec.train
    store = Store.open(spec.store)
    with process_group(
        DistConfig(backend="gloo", timeout_s=tc.engine.dist_timeout, device=tc.run.device)
    ) as ctx:
        if tc.run.threads is None and ctx.world_size > 1:
            # the ranks on this machine share its cores (torchrun's OMP_NUM_THREADS=1 left
            # all but one idle; --threads per rank oversubscribed them: docs/measurements.md)
            set_threads(threads_per_process(local_peers(ctx)[0]))
        else:
            set_threads(tc.run.threads)
        auto = None
        if tc.engine.name == "auto":
            tc, auto = _auto_engine(store, tc, ctx)
        typed = store.schema is not None
        engine = get_engine(tc.engine.name, tc.task, typed=typed)(store, tc, ctx)
        _call_hooks(spec, engine, ctx)
        result = engine.fit().to_json()
        # drop the engine (its DDP reducer holds the group) before the group is destroyed:
        # destroy_process_group with a live DistributedDataParallel hangs at exit
        del engine
        if ctx.is_rank0:
            result["store"] = str(Path(spec.store).resolve())
            result["command"] = spec.command if spec.command is not None else sys.argv
            if auto is not None:
                result["auto_plan"] = auto
            print(_summary(result))
            write_json_output(spec.json, result)
    return 0


def _launch_local(spec: LaunchSpec, *, replace_process: bool = False) -> int:
    """Run ``spec.train.engine.nproc`` workers of this module through :mod:`shoal.launcher`
    (standard library only), in place of this process with ``replace_process`` (it never
    returns then: the launcher's exit code is the process's), else as a child process."""
    tc = spec.train
    tmp = tempfile.mkdtemp(prefix="shoal-launch-")  # a few bytes of JSON; the launcher removes it
    spec_path = Path(tmp) / "spec.json"
    spec_path.write_text(json.dumps(spec.to_dict()))
    argv = [
        sys.executable,
        "-m",
        "shoal.launcher",
        f"--nproc={tc.engine.nproc}",
        f"--max-restarts={tc.engine.max_restarts}",
        f"--remove={tmp}",
        "--",
        sys.executable,
        "-m",
        "shoal.engines.launch",
        "--worker-spec",
        str(spec_path),
    ]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if replace_process:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, argv)
    return subprocess.run(argv, check=False).returncode


def run(spec: LaunchSpec, *, replace_process: bool = False) -> int:
    """Run distributed training as ``spec`` says; returns the exit code. With
    ``replace_process`` (the CLI, when nothing follows the run) the launcher of ``nproc > 1``
    workers takes this process's place, so this process's imports leave the workers' memory."""
    from shoal.engines.registry import get_engine
    from shoal.store import Store

    name, task = spec.train.engine.name, spec.train.task
    if name != "auto":  # a clear error for an unknown engine, first
        get_engine(name, task)
    store = Store.open(spec.store)  # fail early, before starting processes
    if name != "auto":  # and on what the engine does not support (its spec's flags)
        get_engine(
            name,
            task,
            typed=store.schema is not None,
            factory=bool(spec.train.model.factory),
            device=spec.train.run.device,
        )
    resolve_device(spec.train.run.device)  # --device cuda without a GPU: exit 2 here, once
    under_torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if under_torchrun or spec.train.engine.nproc == 1:
        return worker(spec)
    return _launch_local(spec, replace_process=replace_process)


@record
def main(argv: list[str] | None = None) -> int:
    """``python -m shoal.engines.launch --worker-spec FILE``: one worker of :func:`run`."""
    import logging

    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] != "--worker-spec":
        print(
            "usage: python -m shoal.engines.launch --worker-spec FILE (started by `shoal train "
            "--store ... --nproc N`; under torchrun use `-m shoal train --store ...`)",
            file=sys.stderr,
        )
        return 2
    spec = LaunchSpec.from_dict(json.loads(Path(argv[1]).read_text()))
    level = getattr(logging, os.environ.get("SHOAL_LOG_LEVEL", "INFO").upper(), logging.INFO)
    logging.basicConfig(level=level, format="%(asctime)s %(name)s: %(message)s")
    try:
        return worker(spec)
    except (ShoalDiskFullError, ShoalPeerLostError) as e:  # one line (the traceback with -v)
        if os.environ.get("SHOAL_LOG_LEVEL") in ("INFO", "DEBUG"):  # -v, -vv
            logging.getLogger("shoal").info("what failed", exc_info=e)
        print(f"shoal: error: {e}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
