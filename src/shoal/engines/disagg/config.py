"""The ``disagg`` engine's options (Armada's disaggregated batch preparation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from shoal.training.engine_config import EngineConfig
from shoal.utils.io import parse_size

__all__ = ["REPLICATE_TOP", "REPLICA_EXEC", "DisaggConfig"]

#: default of ``replicate_top`` (off: docs/distributed.md#disagg-armada, replication)
REPLICATE_TOP = "0"
#: default of ``replica_exec`` (reproducible: docs/distributed.md#disagg-armada, replicas)
REPLICA_EXEC = "sequential"
SWAPPED = ("read", "skip")
REPLICA_EXECS = ("sequential", "threads")


@dataclass(kw_only=True)
class DisaggConfig(EngineConfig):
    """Armada's options (Sec. 3, 5, 6.1), besides the shared :class:`EngineConfig` ones.

    Args:
        batch_workers: ranks that sample and load features (the last ones); the others
            compute; at least as many as compute workers; None = half the ranks, rounded up
            (default None).
        replicas: model replicas per compute worker, ``G`` (one per GPU; on CPU the ``G``
            mini-batches run one after the other); a batch worker sends them as one global
            batch (default 1).
        disagg_cache: LRU feature cache of each compute worker: rows (an int), a share of
            the nodes (``"5%"``) or a size (``"64MiB"``); 0 = off (default ``"5%"``).
        batch_queue: global batches a batch worker may have in flight (default 4).
        local_sampling: sample only the edges among a batch worker's own parts, no traffic
            between batch workers (default false: remote sampling, the same distribution as
            ``minibatch``).
        grouping: send the rows of a global batch's union once (default true; false sends
            every mini-batch's rows, an ablation).
        resident_parts: most parts a batch worker holds together (the rest are swapped in
            one at a time); None = as many as half its memory budget holds (default None).
        replicate_top: nodes of highest in-degree whose neighbour lists and feature rows
            every batch worker keeps (Sec. 3 and 5: the "special partition"), so remote
            sampling needs no request for them: nodes (an int) or a share (``"1%"``); 0 =
            off (default 0, ``REPLICATE_TOP``: the paper's runs, Sec. 6.1, replicate nothing).
        swapped_neighbours: a frontier node whose part is swapped out at its batch worker:
            ``"read"`` samples it from the store's files (the draws of a resident part),
            ``"skip"`` gives it no neighbours (the paper's footnote 1) and warns with the
            count (default ``"read"``).
        replica_exec: how a compute worker runs its ``G`` replicas: ``"threads"`` (weights
            shared, gradients summed in replica order; with dropout not reproducible bit for
            bit) or ``"sequential"`` (default, ``REPLICA_EXEC``).

    Each option, and the measurements behind the defaults: docs/distributed.md#disagg-armada.
    """

    engine: ClassVar[str] = "disagg"

    name: str = "disagg"
    batch_workers: int | None = None
    replicas: int = 1
    disagg_cache: str | int = "5%"
    batch_queue: int = 4
    local_sampling: bool = False
    grouping: bool = True
    resident_parts: int | None = None
    replicate_top: str | int = REPLICATE_TOP
    swapped_neighbours: str = "read"
    replica_exec: str = REPLICA_EXEC

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.swapped_neighbours not in SWAPPED:
            raise ValueError(
                f"swapped_neighbours must be one of {SWAPPED}, got {self.swapped_neighbours!r}"
            )
        if self.replica_exec not in REPLICA_EXECS:
            raise ValueError(
                f"replica_exec must be one of {REPLICA_EXECS}, got {self.replica_exec!r}"
            )
        _check_count(
            "replicate_top",
            self.replicate_top,
            "nodes (e.g. 2000) or a share of the nodes (e.g. 1%)",
        )
        for key in ("replicas", "batch_queue"):
            if int(getattr(self, key)) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        for key in ("batch_workers", "resident_parts"):
            v = getattr(self, key)
            if v is not None and int(v) < 1:
                raise ValueError(f"{key} must be >= 1 (or None), got {v}")
        _check_count(
            "disagg_cache",
            self.disagg_cache,
            "rows (e.g. 10000), a share of the nodes (e.g. 5%) or a size (e.g. 64MiB)",
            sizes=True,
        )


def _check_count(key: str, spec: str | int, what: str, sizes: bool = False) -> None:
    """``spec``: a count >= 0, a percentage in [0, 100] or (``sizes``) a size."""
    text = str(spec).strip()
    try:
        if text.endswith("%"):
            ok = 0.0 <= float(text[:-1]) <= 100.0
        elif isinstance(spec, int) or text.isdigit() or not sizes:
            ok = int(text) >= 0
        else:
            ok = parse_size(text) >= 0
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{key} must be {what}, got {spec!r}")
