"""Fault injection for the launcher tests, through ``LaunchSpec.hooks`` (never CLI flags).

``python -m tests.engines.faults HOOK [HOOK ...] -- SHOAL_TRAIN_ARGS`` parses the arguments as
``shoal train`` does, adds the hooks to the launch spec and runs it, so the workers started
by torch.distributed.run call the hooks with ``(engine, ctx)`` once their engine is built.
"""

from __future__ import annotations

import argparse
import os
import sys


def fail_on_rank_1(engine, ctx) -> None:
    """Rank 1 raises right after joining the group."""
    if ctx.rank == 1:
        raise RuntimeError(f"injected failure on rank {ctx.rank}")


def fail_at_epoch_5(engine, ctx) -> None:
    """The last rank raises in epoch 5 (1-based), in the first attempt only (torchrun counts
    restarts in ``TORCHELASTIC_RESTART_COUNT``)."""
    if ctx.rank != ctx.world_size - 1 or int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")):
        return
    train_epoch = engine.train_epoch

    def failing(e: int):
        if e + 1 == 5:
            raise RuntimeError("injected failure in epoch 5")
        return train_epoch(e)

    engine.train_epoch = failing


def fail_batch_worker_mid_epoch(engine, ctx) -> None:
    """disagg: the last rank (a batch worker) raises while preparing its second global batch,
    while its compute worker waits for it."""
    if ctx.rank != ctx.world_size - 1:
        return
    step = engine.worker._step
    calls = [0]

    def failing(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 2:
            raise RuntimeError("injected failure in a batch worker")
        return step(*args, **kwargs)

    engine.worker._step = failing


def main(argv: list[str]) -> int:
    from shoal.cli.train import spec_from_args
    from shoal.cli.train_options import add_train_arguments
    from shoal.engines.launch import run

    split = argv.index("--")
    hooks, rest = argv[:split], argv[split + 1 :]
    p = argparse.ArgumentParser()
    add_train_arguments(p)
    spec = spec_from_args(p.parse_args(rest))
    spec.hooks = tuple(f"tests.engines.faults:{h}" for h in hooks)
    return run(spec)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
