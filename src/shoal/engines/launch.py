"""Entry point of distributed training: ``shoal train --store STORE --engine NAME --nproc N``.

One machine, one command: with ``--nproc N > 1`` (and outside torchrun) :func:`run` starts
PyTorch's own elastic launcher in-process (``torch.distributed.run`` with ``--standalone``:
a free rendezvous port, N worker processes, all killed if one fails) on this module. On a
cluster the same program is started by torchrun on every machine::

    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29400 -m shoal.engines.launch --store STORE --engine minibatch

Each worker opens the process group from torchrun's environment
(:func:`shoal.dist.process_group`), builds the engine, trains, and rank 0 prints the summary
and writes ``--json``. A failing rank makes the run exit non-zero with that rank's traceback.

``add_arguments(parser)`` adds the distributed flags (the trainer's flags come from
:func:`shoal.train_cli.add_train_arguments`); ``run(args)`` runs; ``python -m
shoal.engines.launch --help`` lists everything.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from torch.distributed.elastic.multiprocessing.errors import record

__all__ = ["add_arguments", "build_parser", "main", "run"]

log = logging.getLogger("shoal.engines")


def add_arguments(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """Add ``--store``, ``--engine``, ``--nproc``, ``--plan``, ``--average-every``,
    ``--dist-timeout`` (the trainer's own flags are added by ``add_train_arguments``)."""
    from shoal.engines.base import ENGINES

    g = parser.add_argument_group("distributed")
    g.add_argument(
        "--store", metavar="STORE", help="partitioned store (`shoal store build`) to train on"
    )
    g.add_argument(
        "--engine",
        choices=sorted(ENGINES),
        default="minibatch",
        help="minibatch: sync SGD with remote sampling and feature pulls (DistDGL); averaging: "
        "local training on parts + weighted model averaging every k epochs, needs a store "
        "built with --halo-features (SDT-GNN) (default minibatch)",
    )
    g.add_argument(
        "--nproc",
        type=int,
        default=1,
        help="processes to start on this machine through torch.distributed.run (default 1); "
        "ignored under torchrun, which sets the world itself",
    )
    g.add_argument(
        "--plan",
        metavar="FILE",
        help="plan JSON from `shoal plan` (default: part j -> rank j mod N)",
    )
    g.add_argument(
        "--average-every",
        type=int,
        default=1,
        metavar="K",
        help="averaging engine: average the models every K epochs (default 1)",
    )
    g.add_argument(
        "--local-optimizer-state",
        action="store_true",
        help="averaging engine: keep each rank's own Adam moments instead of averaging them "
        "with the weights (default: averaged)",
    )
    g.add_argument(
        "--dist-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="timeout of every collective; a stuck peer fails the run after this (default 300)",
    )
    g.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        metavar="N",
        help="with --nproc: restart all workers up to N times after a failure (torchrun's "
        "--max-restarts); add --checkpoint-dir DIR --resume so a restarted run continues "
        "from the last completed epoch instead of epoch 1 (default 0)",
    )
    # for tests of failure handling: this rank raises right after joining the group
    g.add_argument("--fail-on-rank", type=int, default=None, help=argparse.SUPPRESS)
    # for tests of restarts: the last rank raises in this epoch (1-based), first attempt only
    g.add_argument("--fail-at-epoch", type=int, default=None, help=argparse.SUPPRESS)
    return g


def build_parser() -> argparse.ArgumentParser:
    from shoal.train_cli import add_train_arguments

    p = argparse.ArgumentParser(
        prog="python -m shoal.engines.launch",
        description="Distributed GNN training on a partitioned store (run it under torchrun, or "
        "give --nproc to start the processes on this machine).",
    )
    add_train_arguments(p)
    add_arguments(p)
    return p


def _summary(d: dict[str, Any]) -> str:
    c = d["comm_per_epoch"]
    return (
        f"{d['engine']} on {d['world_size']} process(es), {d['num_parts']} parts: "
        f"test accuracy {d['test_accuracy']:.4f}, val {d['val_accuracy']:.4f} "
        f"(best epoch {d['best_epoch']}/{d['epochs']}), {d['seconds_per_epoch']:.3f} s/epoch, "
        f"{c.get('bytes_sent', 0) / 1e6:.2f} MB sent + {c.get('allreduce_bytes', 0) / 1e6:.2f} MB "
        f"all-reduced per epoch, remote feature fraction {c.get('remote_feature_fraction', 0):.3f}"
    )


def _write_json(path: str, data: dict[str, Any]) -> None:
    if path == "-":
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    from shoal.utils.io import write_json_atomic

    write_json_atomic(Path(path), data)


def _worker(args: argparse.Namespace) -> int:
    """One rank: open the group, train, report (rank 0)."""
    from shoal.dist import DistConfig, process_group
    from shoal.engines.base import EngineConfig, get_engine
    from shoal.store import Store
    from shoal.train import set_threads
    from shoal.train_cli import config_from_args

    tc = config_from_args(args)
    cfg = EngineConfig(
        train=tc,
        average_every=args.average_every,
        average_optimizer=not getattr(args, "local_optimizer_state", False),
        plan=args.plan,
    )
    store = Store.open(args.store)
    engine_cls = get_engine(args.engine)
    # the engines train on CPU and exchange CPU tensors (sampling requests, feature rows), which
    # nccl cannot carry: they always use gloo, also on machines with CUDA
    with process_group(DistConfig(backend="gloo", timeout_s=args.dist_timeout)) as ctx:
        # hidden --fail-on-rank: tests check that the run exits non-zero with this error
        if getattr(args, "fail_on_rank", None) == ctx.rank:
            raise RuntimeError(f"injected failure on rank {ctx.rank} (--fail-on-rank)")
        if tc.threads is None and ctx.world_size > 1:
            import torch

            set_threads(torch.get_num_threads())  # torchrun sets OMP_NUM_THREADS=1
        else:
            set_threads(tc.threads)
        engine = engine_cls(store, cfg, ctx)
        fail_at = getattr(args, "fail_at_epoch", None)
        if fail_at and ctx.rank == ctx.world_size - 1:
            _inject_failure(engine, fail_at)
        result = engine.fit().to_json()
        # drop the engine (its DDP reducer holds the group) before the group is destroyed:
        # destroy_process_group with a live DistributedDataParallel hangs at exit
        del engine
        if ctx.is_rank0:
            result["store"] = str(Path(args.store).resolve())
            result["command"] = getattr(args, "_command", None) or sys.argv
            print(_summary(result))
            if getattr(args, "json", None):
                _write_json(args.json, result)
            if getattr(args, "_result_file", None):
                _write_json(args._result_file, result)
    return 0


def _inject_failure(engine, epoch: int) -> None:
    """Hidden --fail-at-epoch: raise in ``epoch`` (1-based) in the first attempt only (torchrun
    counts restarts in ``TORCHELASTIC_RESTART_COUNT``)."""
    if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0:
        return
    train_epoch = engine.train_epoch

    def failing(e: int):
        if e + 1 == epoch:
            raise RuntimeError(f"injected failure in epoch {epoch} (--fail-at-epoch)")
        return train_epoch(e)

    engine.train_epoch = failing


def _launch_local(args: argparse.Namespace) -> int:
    """Run ``args.nproc`` workers of this module through torch.distributed.run."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args
    from torch.distributed.run import run as elastic_run

    spec = {k: v for k, v in vars(args).items() if not callable(v)}
    spec["fanouts"] = list(spec["fanouts"]) if spec.get("fanouts") else spec.get("fanouts")
    spec["_command"] = getattr(args, "_command", None) or sys.argv
    with tempfile.TemporaryDirectory(prefix="shoal-launch-") as tmp:
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec))
        launcher = parse_args(
            [
                "--standalone",
                f"--nproc-per-node={args.nproc}",
                f"--max-restarts={args.max_restarts}",
                "--monitor-interval=0.2",
                "--module",
                "shoal.engines.launch",
                "--worker-spec",
                str(spec_path),
            ]
        )
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        # restarted workers must not find the previous attempt's gloo addresses in a store
        # shared with the rendezvous (pytorch/pytorch#135712): give each attempt its own
        os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
        try:
            elastic_run(launcher)
        except ChildFailedError as e:
            print(f"shoal: distributed training failed:\n{e.format_msg()}", file=sys.stderr)
            return 1
    return 0


def run(args: argparse.Namespace) -> int:
    """Run distributed training as the parsed flags say; returns the exit code."""
    from shoal.errors import ShoalInputError

    if not getattr(args, "store", None):
        raise ShoalInputError(
            "--store is required", fix="give a store built by `shoal store build`"
        )
    if args.nproc < 1:
        raise ShoalInputError(f"--nproc must be >= 1, got {args.nproc}")
    if args.average_every < 1:
        raise ShoalInputError(f"--average-every must be >= 1, got {args.average_every}")
    if getattr(args, "max_restarts", 0) < 0:
        raise ShoalInputError(f"--max-restarts must be >= 0, got {args.max_restarts}")
    from shoal.store import Store

    Store.open(args.store)  # fail early, before starting processes
    under_torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if under_torchrun or args.nproc == 1:
        return _worker(args)
    return _launch_local(args)


@record
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "--worker-spec":
        spec = json.loads(Path(argv[1]).read_text())
        if spec.get("fanouts") is not None:
            spec["fanouts"] = tuple(spec["fanouts"])
        args = argparse.Namespace(**spec)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
        return _worker(args)
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    try:
        return run(args)
    except Exception as e:
        from shoal.errors import ShoalInputError

        if isinstance(e, ShoalInputError):
            print(f"shoal: error: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    raise SystemExit(main())
