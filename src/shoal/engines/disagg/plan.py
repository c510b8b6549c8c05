"""Roles, part assignment and the per-epoch schedule of the ``disagg`` engine (Armada).

Waleffe et al., "Armada: Memory-Efficient Distributed Training of Large-Scale Graph Neural
Networks" (2025), Section 3 (batch workers feed compute workers, each a fixed one) and
Section 5, "Partition Assignment to Batch Construction Workers". Ranks ``0 .. C-1`` compute,
``C .. W-1`` are batch workers (at least ``C``); batch worker ``j`` feeds compute worker
``j mod C``; the coordinator is the first batch worker. Every rank computes the same schedule
(:func:`epoch_schedule`) from what every batch worker announces (its **phases**: the parts
resident together, then one per swap, and their training seeds)
(docs/distributed.md#disagg-armada, "Equal iterations").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "EpochSchedule",
    "Roles",
    "assign_parts",
    "chunk_counts",
    "default_batch_workers",
    "epoch_schedule",
    "link_schedule",
    "phases",
]


def default_batch_workers(world: int) -> int:
    """Half the ranks, rounded up (every compute worker needs a batch worker)."""
    return (world + 1) // 2


@dataclass(frozen=True)
class Roles:
    """Who does what in a world of ``world`` ranks with ``batch_workers`` batch workers."""

    world: int
    batch_workers: int

    def __post_init__(self) -> None:
        if not 1 <= self.batch_workers < self.world:
            raise ValueError(
                f"the disagg engine needs 1 <= batch workers < world size "
                f"({self.world}), got {self.batch_workers}"
            )
        if self.batch_workers < self.compute_workers:
            raise ValueError(
                f"{self.batch_workers} batch workers cannot feed "
                f"{self.compute_workers} compute workers (each needs one)"
            )

    @property
    def compute_workers(self) -> int:
        return self.world - self.batch_workers

    @property
    def compute_ranks(self) -> list[int]:
        return list(range(self.compute_workers))

    @property
    def batch_ranks(self) -> list[int]:
        return list(range(self.compute_workers, self.world))

    @property
    def coordinator(self) -> int:
        return self.compute_workers

    def is_batch(self, rank: int) -> bool:
        return rank >= self.compute_workers

    def batch_index(self, rank: int) -> int:
        return rank - self.compute_workers

    def compute_of(self, b: int) -> int:
        """The compute rank batch worker ``b`` (index among batch workers) feeds."""
        return b % self.compute_workers

    def feeders(self, c: int) -> list[int]:
        """Batch worker indices feeding compute rank ``c``, in order."""
        return list(range(c, self.batch_workers, self.compute_workers))


def assign_parts(num_parts: int, batch_workers: int, seed: int, epoch: int) -> np.ndarray:
    """The coordinator's random split: ``(num_parts,)`` batch worker of each part; a worker's
    parts, in the order returned by :func:`parts_in_order`, are its random loading order."""
    perm = np.random.default_rng([seed, epoch, 0xA4]).permutation(num_parts)
    out = np.empty(num_parts, np.int64)
    out[perm] = np.arange(num_parts) % batch_workers
    return out


def parts_in_order(part_to_bw: np.ndarray, b: int, seed: int, epoch: int) -> list[int]:
    """Batch worker ``b``'s parts in its random loading order."""
    perm = np.random.default_rng([seed, epoch, 0xA4]).permutation(len(part_to_bw))
    return [int(p) for p in perm if part_to_bw[p] == b]


def phases(
    order: list[int], part_bytes: np.ndarray, budget: int, max_parts: int | None = None
) -> list[list[int]]:
    """Phases of one epoch: the longest prefix of ``order`` whose bytes fit ``budget`` (and at
    most ``max_parts`` parts; at least one part) is loaded together; each later part is
    swapped in alone (evicting the oldest). Returns the parts new in each phase."""
    if not order:
        return []
    used, k = 0, 0
    while k < len(order) and (
        k == 0
        or (used + int(part_bytes[order[k]]) <= budget and (max_parts is None or k < max_parts))
    ):
        used += int(part_bytes[order[k]])
        k += 1
    return [order[:k]] + [[p] for p in order[k:]]


def chunk_counts(seeds: np.ndarray, total: int, per_unit: int | None = None) -> np.ndarray:
    """Split ``total`` units over groups with ``seeds[i]`` seeds: one per non-empty group
    (``ceil(seeds / per_unit)`` with ``per_unit``), the rest by largest remainder in
    proportion to the seeds (ties to the lower index)."""
    seeds = np.asarray(seeds, np.int64)
    out = (seeds > 0).astype(np.int64)
    if per_unit is not None:
        out = -(-seeds // per_unit)
    if out.sum() > total:
        raise ValueError(f"{total} units cannot cover {int(out.sum())} non-empty groups")
    if seeds.sum() == 0:
        out[: len(out)] = 0
        if len(out):
            out[0] = total
        return out
    ideal = np.where(seeds > 0, total * seeds / seeds.sum(), -np.inf)
    for _ in range(total - int(out.sum())):
        out[int(np.argmax(ideal - out))] += 1
    return out


@dataclass
class EpochSchedule:
    """One epoch's plan (identical on every rank).

    ``rounds``: lock steps of the batch workers; ``per_round[b]``: global batches batch worker
    ``b`` prepares in each (so ``batches[b] = rounds * per_round[b]``); ``phase_batches[b]``:
    how many of its batches each of its phases gets; ``order[c]``: compute rank ``c``'s
    iterations as ``(batch worker, its batch index)``; ``sizes[b]``: seeds of each mini-batch
    of ``b`` (``replicas`` per global batch, in order).
    """

    batches: np.ndarray
    per_round: np.ndarray
    phase_batches: list[np.ndarray]
    rounds: int
    order: list[list[tuple[int, int]]]
    sizes: list[np.ndarray]
    replicas: int = 1

    @property
    def iterations(self) -> int:
        return len(self.order[0]) if self.order else 0

    def iteration_seeds(self, i: int) -> int:
        """Seeds of iteration ``i`` summed over every compute worker (the loss's divisor)."""
        g, total = self.replicas, 0
        for order in self.order:
            b, k = order[i]
            total += int(self.sizes[b][k * g : (k + 1) * g].sum())
        return total


def epoch_schedule(
    phase_seeds: list[list[int]], roles: Roles, *, batch_size: int, replicas: int
) -> EpochSchedule:
    """The schedule from every batch worker's seeds per phase.

    Iterations come in **rounds** of ``R`` (the most feeders any compute worker has): in round
    ``s`` every compute worker takes ``R`` global batches, its feeders in turn, and every batch
    worker prepares its share of them in lock step ``s``. All compute workers thus consume the
    same step's batches at the same iterations, so a batch worker waiting for its queue to
    drain never waits on a compute worker that waits (through the all-reduce) for it. The
    number of rounds covers every phase's seeds in batches of at most ``batch_size`` per
    replica (so every phase with seeds gets a batch)."""
    B, G = roles.batch_workers, replicas
    unit = G * batch_size
    h = np.array([sum(-(-x // unit) for x in s) for s in phase_seeds], np.int64)
    per_round, rounds, order = _rounds(h, roles)
    batches = per_round * rounds
    phase_batches, sizes = [], []
    for b in range(B):
        pb = chunk_counts(np.array(phase_seeds[b] or [0], np.int64), int(batches[b]), unit)
        phase_batches.append(pb if phase_seeds[b] else np.zeros(0, np.int64))
        sz = [np.array_split(np.zeros(s), k * G) for s, k in zip(phase_seeds[b], pb) if k]
        flat = [len(a) for parts in sz for a in parts]
        flat += [0] * (int(batches[b]) * G - len(flat))
        sizes.append(np.array(flat, np.int64))
    return EpochSchedule(batches, per_round, phase_batches, rounds, order, sizes, G)


def link_schedule(
    steps: int, num_phases: list[int], roles: Roles, *, replicas: int
) -> EpochSchedule:
    """The link task's schedule (``--task link``): every batch worker has ``steps`` link
    steps (:attr:`~shoal.engines.linktask.DistLinkTask.num_batches`, the same on every rank),
    ``replicas`` consecutive ones per global batch, in the rounds of :func:`epoch_schedule`
    (a worker with more batches than steps sends empty ones); its ``num_phases[b]`` phases
    are spread evenly over its batches (a link batch's nodes lie anywhere: no phase holds
    them). ``sizes``: 1 per mini-batch with a step, 0 for the padding."""
    G = replicas
    h = np.full(roles.batch_workers, -(-steps // G), np.int64)
    per_round, rounds, order = _rounds(h, roles)
    batches = per_round * rounds
    phase_batches, sizes = [], []
    for b in range(roles.batch_workers):
        n, nb = num_phases[b], int(batches[b])
        at = np.arange(nb) * n // nb if nb else np.zeros(0, np.int64)
        phase_batches.append(np.bincount(at, minlength=n).astype(np.int64))
        sizes.append((np.arange(nb * G) < steps).astype(np.int64))
    return EpochSchedule(batches, per_round, phase_batches, rounds, order, sizes, G)


def _rounds(h: np.ndarray, roles: Roles) -> tuple[np.ndarray, int, list[list[tuple[int, int]]]]:
    """``(per_round, rounds, order)`` for batch workers that need ``h[b]`` global batches
    (:func:`epoch_schedule`)."""
    B = roles.batch_workers
    R = max(len(roles.feeders(c)) for c in roles.compute_ranks)
    per_round = np.zeros(B, np.int64)
    for c in roles.compute_ranks:
        f = roles.feeders(c)
        for q, b in enumerate(f):
            per_round[b] = len(range(q, R, len(f)))
    rounds = max([1] + [-(-int(h[b]) // int(per_round[b])) for b in range(B)])
    order = []
    for c in roles.compute_ranks:
        f = roles.feeders(c)
        order.append(
            [
                (f[j % len(f)], s * int(per_round[f[j % len(f)]]) + j // len(f))
                for s in range(rounds)
                for j in range(R)
            ]
        )
    return per_round, rounds, order
