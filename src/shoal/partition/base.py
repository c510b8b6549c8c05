"""The partitioner interface, the assignment it returns, and the registry of algorithms.

Every algorithm is one module in this package holding one :class:`Partitioner` subclass with
its own keyword-only ``Config`` dataclass (a subclass of :class:`PartitionConfig`). A
partitioner reads the graph only through :class:`~shoal.data.GraphDir` (``edge_stream()`` for
edge passes, ``csr()`` for vertex-stream passes) and keeps O(V) state, except the in-memory
references (METIS, KaMinPar), which say so in their docstring.

Every result gives each node an owner part (``node_part``); vertex-cut algorithms also return
the part of every edge (``edge_part``, aligned with the graph's edge file) and their
``node_part`` is the part holding most of the node's edges, ties to the lowest index.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

from shoal.data.format import GraphDir
from shoal.data.stream import DEFAULT_CHUNK_EDGES
from shoal.errors import ShoalInputError

__all__ = [
    "OPTIONAL_IMPORTS",
    "REGISTRY",
    "Assignment",
    "PartitionConfig",
    "Partitioner",
    "available",
    "get_partitioner",
]


@dataclass(kw_only=True)
class PartitionConfig:
    """Options shared by every partitioner.

    Args:
        num_parts: number of parts ``p`` (>= 1, <= number of nodes).
        seed: random seed; the same seed gives the same assignment (default 0).
        chunk_edges: edges per streamed chunk (default 2**20).
        balance: bound on max/mean of nodes and of training nodes per part (default 1.10).
        refine_passes: restreaming refinement passes after the algorithm (default 0).
        edge_balance: if set, also bound max/mean in-edges per part (its sampling work) by
            this, as DistDGL's multi-constraint METIS: honoured by GREM and the refinement
            passes (default None; :data:`shoal.partition.run.DEFAULT_OPTIONS` sets it).
        scratch_dir: where a private directory holds large temporary files (vertex-cut
            algorithms' edge->part file, KaMinPar's graph file); default None: beside the
            graph directory (``shoal partition``: beside ``--out``).
    """

    num_parts: int
    seed: int = 0
    chunk_edges: int = DEFAULT_CHUNK_EDGES
    balance: float = 1.10
    refine_passes: int = 0
    edge_balance: float | None = None
    scratch_dir: str | None = None

    def __post_init__(self) -> None:
        if self.num_parts < 1:
            raise ShoalInputError(f"num_parts must be >= 1, got {self.num_parts}")
        if self.chunk_edges < 1:
            raise ShoalInputError(f"chunk_edges must be >= 1, got {self.chunk_edges}")
        if self.balance < 1.0:
            raise ShoalInputError(f"balance must be >= 1.0, got {self.balance}")
        if self.edge_balance is not None and self.edge_balance < 1.0:
            raise ShoalInputError(f"edge_balance must be >= 1.0, got {self.edge_balance}")
        if self.refine_passes < 0:
            raise ShoalInputError(f"refine_passes must be >= 0, got {self.refine_passes}")
        if self.scratch_dir is not None:
            self.scratch_dir = os.fspath(self.scratch_dir)  # a str in params/meta.json

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class Assignment:
    """A partitioning result.

    Attributes:
        node_part: int32 (N,) owner part of every node, in ``[0, num_parts)``.
        num_parts: ``p``.
        algorithm: registry name of the algorithm.
        params: the config that produced it (for meta.json).
        edge_part: for vertex-cut algorithms, the part of every edge in the graph's edge file
            order (int16/int32 array or memory map), else None.
        seconds: wall seconds per phase (e.g. ``{"degrees": 0.1, "clustering": 0.9}``).
    """

    node_part: np.ndarray
    num_parts: int
    algorithm: str
    params: dict[str, Any] = field(default_factory=dict)
    edge_part: np.ndarray | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.node_part = np.asarray(self.node_part, dtype=np.int32)

    @property
    def num_nodes(self) -> int:
        return int(self.node_part.shape[0])

    def part_sizes(self) -> np.ndarray:
        return np.bincount(self.node_part, minlength=self.num_parts)


class Partitioner:
    """Base class. Subclasses set ``name``, ``Config`` and implement :meth:`partition`."""

    name: ClassVar[str] = ""
    Config: ClassVar[type[PartitionConfig]] = PartitionConfig
    #: True for vertex-cut (edge) partitioners, which fill ``Assignment.edge_part``.
    vertex_cut: ClassVar[bool] = False
    #: True for in-memory references that load the whole graph (METIS, KaMinPar).
    in_memory: ClassVar[bool] = False

    def __init__(self, config: PartitionConfig) -> None:
        if not isinstance(config, self.Config):
            raise TypeError(f"{type(self).__name__} needs a {self.Config.__name__}")
        self.config = config

    def partition(self, graph: GraphDir, train_mask: np.ndarray | None = None) -> Assignment:
        """Assign every node of ``graph`` to a part. ``train_mask`` (bool, N) lets the
        algorithm balance training nodes too."""
        raise NotImplementedError

    def assignment(
        self,
        node_part: np.ndarray,
        seconds: dict[str, float],
        *,
        edge_part: np.ndarray | None = None,
        **params: Any,
    ) -> Assignment:
        """The :class:`Assignment` of a run: ``params`` adds to the config's."""
        return Assignment(
            node_part=node_part,
            num_parts=self.config.num_parts,
            algorithm=self.name,
            params={**self.config.to_dict(), **params},
            edge_part=edge_part,
            seconds=seconds,
        )


#: name -> "module:Class" (imported on first use, so importing shoal stays cheap).
REGISTRY: dict[str, str] = {
    "spring": "shoal.partition.spring:Spring",
    "grem": "shoal.partition.grem:Grem",
    "hdrf": "shoal.partition.hdrf:HDRF",
    "dbh": "shoal.partition.dbh:DBH",
    "greedy": "shoal.partition.greedy:Greedy",
    "2ps-l": "shoal.partition.twops:TwoPSL",
    "ldg": "shoal.partition.ldg:LDG",
    "fennel": "shoal.partition.fennel:Fennel",
    "hash": "shoal.partition.simple:Hash",
    "random": "shoal.partition.simple:Random",
    "metis": "shoal.partition.metis:Metis",
    "kaminpar": "shoal.partition.kaminpar:KaMinPar",
}


#: name -> the optional packages (import names) the algorithm needs.
#: Only these may be missing: :func:`available` leaves the algorithm out; any other missing
#: module is a broken installation and raises.
OPTIONAL_IMPORTS: dict[str, tuple[str, ...]] = {"metis": ("pymetis",), "kaminpar": ("kaminpar",)}


def available() -> list[str]:
    """Registry names that can run here: every algorithm whose optional packages
    (:data:`OPTIONAL_IMPORTS`) are installed.

    Raises:
        ModuleNotFoundError: an algorithm's module, or an optional package, fails to import
            because of a module that is not one of its optional packages (a broken install
            must fail loudly, not look like an uninstalled extra).
    """
    out = []
    for name in REGISTRY:
        optional = OPTIONAL_IMPORTS.get(name, ())
        try:
            _load(name)
            for module in optional:
                importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name in optional:
                continue
            raise
        out.append(name)
    return out


def _load(name: str) -> type[Partitioner]:
    mod, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(mod), cls)


def get_partitioner(name: str, **options: Any) -> Partitioner:
    """Build a registered partitioner from its name and config options.

    Unknown names raise :class:`ShoalInputError` listing the valid ones.
    """
    key = name.lower()
    if key not in REGISTRY:
        raise ShoalInputError(
            f"unknown partitioning algorithm {name!r}; valid names: {', '.join(REGISTRY)}"
        )
    cls = _load(key)
    return cls(cls.Config(**options))
