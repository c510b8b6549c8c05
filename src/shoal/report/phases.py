"""The epoch time split as a report draws it: the phases that make up an epoch, stacked up to
the measured epoch, and the phases measured beside it on a reading thread, drawn apart.

An epoch record's ``time_split`` holds seconds per phase. Most phases are timed on the
training thread one after the other, so they add up to (at most) the epoch's ``seconds``; the
rest of the epoch is time no phase covers (:data:`OTHER`). The window prefetcher's reading
thread (:mod:`shoal.rows.readahead`) times its work while the training thread trains: those
seconds (:data:`BACKGROUND_PHASES`) overlap the epoch, so :func:`epoch_bars` draws them apart
instead of stacking them into an epoch longer than the one measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from shoal.report.load import Run, number

__all__ = [
    "BACKGROUND_PHASES",
    "OTHER",
    "PHASE_NAMES",
    "PHASE_ORDER",
    "READ_AHEAD_PHASES",
    "EpochBars",
    "background_phases",
    "epoch_bars",
    "phase_order",
]

#: Phases measured on a reading thread while the training thread works, never stacked in the
#: epoch: the window prefetcher's reads of a window's rows and of the cache (``read``) and its
#: packing sweeps (``pack``) (:mod:`shoal.rows.prefetch`). The training thread's share of
#: them is its ``io_wait``. Only a loader reading ahead records them. (The distributed
#: engines' windows, :mod:`shoal.distributed.windows`, keep their reading seconds in the
#: record's ``io``, not in ``time_split``.)
BACKGROUND_PHASES: tuple[str, ...] = ("read", "pack")

#: Phases the reading thread takes over when a loader reads ahead (a record with one of
#: :data:`BACKGROUND_PHASES`): it samples the batches it reads the rows of. In such a record
#: they are background phases too; in any other record (no reading ahead; every engine's own
#: sampling) they are the training thread's.
READ_AHEAD_PHASES: tuple[str, ...] = ("sampling",)

#: Phases of the stack in their order, bottom up (others follow, sorted; :data:`OTHER` last).
PHASE_ORDER = tuple(
    (
        "sampling gather io_wait receive_wait assemble local_compute cached_compute "
        "forward_backward backward communication allreduce averaging read pack"
    ).split()
)
#: Names of phases in figures (others: the key with spaces).
PHASE_NAMES = {
    "forward_backward": "forward + backward",
    "io_wait": "I/O wait",
    "allreduce": "all-reduce",
    "receive_wait": "receive wait",
}
#: The epoch time no phase covers (waiting on the slowest rank included).
OTHER = "other (not timed)"


def background_phases(split: Mapping[str, Any]) -> frozenset[str]:
    """The phases of one ``time_split`` that a reading thread measured (module docstring)."""
    if not any(p in split for p in BACKGROUND_PHASES):
        return frozenset()
    return frozenset(p for p in (*BACKGROUND_PHASES, *READ_AHEAD_PHASES) if p in split)


def phase_order(phases: set[str]) -> list[str]:
    """``phases`` in stacking order: :data:`PHASE_ORDER`, then the others sorted, then
    :data:`OTHER`."""
    known = [p for p in PHASE_ORDER if p in phases]
    rest = sorted(phases - set(PHASE_ORDER) - {OTHER})
    return known + rest + ([OTHER] if OTHER in phases else [])


@dataclass(kw_only=True)
class EpochBars:
    """A run's mean epoch by phase, as the time split figure draws it.

    Attributes:
        epoch_seconds: mean measured seconds of the epochs used (the slowest rank's); None
            when the records do not all have ``seconds``.
        stacked, background: mean seconds per epoch of each phase of the training thread
            (with :data:`OTHER` unless they exceed ``epoch_seconds``) and of the reading
            thread's (module docstring).
        epochs: which epochs the means are over (``"epochs 2-5"``).
    """

    epoch_seconds: float | None
    stacked: dict[str, float] = field(default_factory=dict)
    background: dict[str, float] = field(default_factory=dict)
    epochs: str = ""

    @property
    def stacked_seconds(self) -> float:
        """The height of the stack."""
        return sum(self.stacked.values())


def _means(splits: list[Mapping[str, Any]]) -> tuple[dict[str, float], dict[str, float]]:
    """Mean seconds of each phase over ``splits`` (0 where a split lacks it), as (training
    thread's, reading thread's)."""
    fore: dict[str, float] = {}
    back: dict[str, float] = {}
    for split in splits:
        bg = background_phases(split)
        for k, v in split.items():
            side = back if k in bg else fore
            side[k] = side.get(k, 0.0) + (number(v) or 0.0)
    n = len(splits)
    return {k: v / n for k, v in fore.items()}, {k: v / n for k, v in back.items()}


def epoch_bars(run: Run) -> EpochBars | None:
    """The mean epoch of ``run`` by phase (epoch 1 left out when there are more: it holds the
    JIT compilation and the cache warm-up); None when the run records no time split. Runs
    whose records lack it fall back to the result's mean ``time_split`` and
    ``seconds_per_epoch``."""
    recs = [r for r in run.history if isinstance(r.get("time_split"), dict) and r["time_split"]]
    if recs:
        used = recs[1:] if len(recs) > 1 else recs
        fore, back = _means([r["time_split"] for r in used])
        secs = [number(r.get("seconds")) for r in used]
        epoch = fmean(secs) if all(s is not None for s in secs) else None  # type: ignore[arg-type]
        which = {1: "epoch 1", 2: "epoch 2"}.get(len(recs), f"epochs 2-{len(recs)}")
    else:
        ts = run.data.get("time_split")
        if not isinstance(ts, dict) or not ts:
            return None
        fore, back = _means([ts])
        epoch = number(run.data.get("seconds_per_epoch"))
        which = "all epochs (the result's mean)"
    stacked = {p: fore[p] for p in phase_order(set(fore))}
    if epoch is not None and epoch > sum(stacked.values()):
        stacked[OTHER] = epoch - sum(stacked.values())
    background = {p: back[p] for p in phase_order(set(back))}
    return EpochBars(epoch_seconds=epoch, stacked=stacked, background=background, epochs=which)
