"""Checkpoints: atomic save/load of state dicts, and per-epoch checkpoints of a run with exact
resume, shared by the single-process trainer and every engine.

One process (the trainer) writes ``last.pt`` (rewritten atomically every epoch) and
``best.pt``; ``N`` processes (an engine) write ``epoch{E}-rank{R}.pt`` each, committed by
rank 0's ``last.json`` (layout, crash safety, the identity ``resume`` checks, exit 2 on a
mismatch: docs/distributed.md#checkpoints-resuming-restarts). A run resumed on another number
of processes is *resharded* (:meth:`Checkpointer.load`;
docs/distributed.md#resuming-on-another-number-of-processes).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from shoal.errors import ShoalInputError
from shoal.utils.diskspace import reporting_full_disk
from shoal.utils.io import read_json, write_json_atomic

__all__ = [
    "CHECKPOINT_FORMAT",
    "Checkpointer",
    "committed_run",
    "load_checkpoint",
    "save_checkpoint",
]

CHECKPOINT_FORMAT = 2

log = logging.getLogger("shoal.training")


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Write a checkpoint atomically (temporary sibling + rename); out of space, the
    previous checkpoint stays and :class:`~shoal.errors.ShoalDiskFullError` names the
    filesystem."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fix = "free space on the checkpoint's filesystem or choose another --checkpoint-dir"
    try:
        with reporting_full_disk(path, fix=fix, cleanup=lambda: tmp.unlink(missing_ok=True)):
            torch.save(state, tmp)
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True`` (no arbitrary code runs)."""
    try:
        return torch.load(Path(path), map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ShoalInputError("checkpoint not found", path=path) from None
    except Exception as e:  # a corrupt or foreign file
        raise ShoalInputError(f"cannot load checkpoint: {e}", path=path) from None


def check_identity(saved: dict[str, Any] | None, current: dict[str, Any], path: Path) -> None:
    """Refuse to resume from a checkpoint of another run: every key of ``current`` must have
    the same value in ``saved`` (ShoalInputError naming ``path`` and the first mismatch)."""
    if saved is None:
        raise ShoalInputError(
            "the checkpoint does not record which run wrote it (written by an older shoal)",
            path=path,
            fix="use a new --checkpoint-dir",
        )
    for key, want in current.items():
        if saved.get(key) != want:
            raise ShoalInputError(
                f"checkpoint was written by {key} {saved.get(key)!r}, this run has {want!r}",
                path=path,
                fix=f"resume with the same {key}, or use a new --checkpoint-dir",
            )


def committed_run(directory: str | os.PathLike | None) -> dict[str, Any] | None:
    """``last.json`` of a multi-process run in ``directory`` (its world size, epoch, identity
    and engine meta), or None when there is none yet."""
    last = Path(directory) / "last.json" if directory else None
    return read_json(last) if last is not None and last.exists() else None


class Checkpointer:
    """Per-epoch checkpoints of one run in ``directory`` (layout: the module docstring).

    Args:
        directory: the checkpoint directory (created).
        rank, world_size: this process's place; ``world_size == 1`` uses ``last.pt``.
        barrier: waits for every rank (a no-op for one process).
        identity: what must match on resume (engine, model, widths, data shape).
        meta: recorded in ``last.json`` beside the identity, not checked (e.g. the global
            batch an engine keeps when the run resumes on another number of processes).
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        rank: int,
        world_size: int,
        barrier: Callable[[], None],
        identity: dict[str, Any],
        meta: dict[str, Any] | None = None,
    ) -> None:
        self.dir = Path(directory)
        self.meta = dict(meta or {})
        self.rank = rank
        self.world_size = world_size
        self.barrier = barrier
        self.identity = identity
        self.single = world_size == 1 and identity.get("engine") == "single"
        if rank == 0:
            self.dir.mkdir(parents=True, exist_ok=True)
        barrier()

    def _file(self, epoch: int, rank: int | None = None) -> Path:
        return self.dir / f"epoch{epoch}-rank{self.rank if rank is None else rank}.pt"

    def load(self) -> dict[str, Any] | None:
        """This rank's state of the last committed epoch (None when there is none)."""
        last = self.dir / ("last.pt" if self.single else "last.json")
        if not last.exists():
            return None
        if self.single:
            state = load_checkpoint(last)
            check_identity(state.get("identity"), self.identity, last)
            return state
        meta = read_json(last)
        check_identity(meta.get("identity", meta), self.identity, last)
        epoch = int(meta["epoch"])
        saved = int(meta.get("world_size", self.world_size))
        if saved == self.world_size:
            return load_checkpoint(self._file(epoch))
        return self._resharded(epoch, saved)

    def _resharded(self, epoch: int, saved: int) -> dict[str, Any]:
        """This rank's state when the run was saved by ``saved`` processes: saved rank 0's (the
        model and optimizer of a synchronous engine are the same on every rank that trains;
        rank 0 always trains), with ``peers`` (every saved rank's state, in rank order: an
        engine gives each part's state to whichever rank holds it now) and
        ``resharded_from``."""
        peers = [load_checkpoint(self._file(epoch, r)) for r in range(saved)]
        state = dict(peers[0])
        state.update(peers=peers, resharded_from=saved)
        if self.rank == 0:
            log.warning(
                "resuming %s after epoch %d on %d processes; it was saved by %d: the parts "
                "are reassigned (see docs/distributed.md for what each engine keeps)",
                self.dir,
                epoch,
                self.world_size,
                saved,
            )
        return state

    def save(self, epoch: int, state: dict[str, Any], best_model: dict | None) -> None:
        """Write this rank's state after ``epoch`` epochs and commit it (collective).
        ``best_model`` (a state dict) is written to ``best.pt`` when given."""
        state = {**state, "format": CHECKPOINT_FORMAT, "identity": self.identity}
        if self.single:
            if best_model is not None:
                save_checkpoint(self.dir / "best.pt", {"model": best_model})
            save_checkpoint(self.dir / "last.pt", state)
            return
        save_checkpoint(self._file(epoch), state)
        self.barrier()
        if self.rank == 0:
            if best_model is not None:
                save_checkpoint(self.dir / "best.pt", {"model": best_model})
            write_json_atomic(
                self.dir / "last.json",
                {
                    "format": CHECKPOINT_FORMAT,
                    **self.identity,
                    "identity": self.identity,
                    "world_size": self.world_size,
                    **self.meta,
                    "epoch": epoch,
                    "files": [self._file(epoch, r).name for r in range(self.world_size)],
                },
            )
        self.barrier()
        for old in self.dir.glob(f"epoch*-rank{self.rank}.pt"):
            if old.name != self._file(epoch).name:
                old.unlink(missing_ok=True)
        if self.rank == 0:  # files of ranks a larger world had (a resharded run)
            for old in self.dir.glob("epoch*-rank*.pt"):
                if int(old.stem.rsplit("rank", 1)[1]) >= self.world_size:
                    old.unlink(missing_ok=True)
