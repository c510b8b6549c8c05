"""``LinkConfig``: the options of the link-prediction task (``--task link``), the ``link``
section of a run's :class:`~shoal.training.TrainConfig`."""

from __future__ import annotations

from dataclasses import dataclass

from shoal.nn.linkpred import LOSSES, SCORERS
from shoal.training.linkbatches import NEGATIVE_SAMPLERS
from shoal.training.linkheuristics import HEURISTICS

__all__ = ["LinkConfig"]


@dataclass(kw_only=True)
class LinkConfig:
    """Options of the link-prediction task.

    Attributes:
        scorer: ``dot`` (default) or ``mlp`` (:mod:`shoal.nn.linkpred`).
        loss: ``bce`` (default), ``bpr`` or ``margin``; margin: of ``margin`` (default 1.0).
        num_neg: negatives per positive in training (default 1).
        negatives: ``uniform`` (default) or ``in-batch``.
        eval_negatives: negatives per held-out positive for MRR / Hits@K (default 100).
        hits_k: the ``K`` of the reported Hits@K (default 50).
        embedding_dim: learn a ``D``-wide embedding per node as the model's input instead of
            reading features (:class:`~shoal.training.embedding.NodeEmbedding`, a table on
            disk updated sparsely); 0 = use the graph's features (default 0).
        embedding_dir: where the table and its optimizer state live (default: ``<graph>.emb``
            beside the graph directory; an existing table is reopened only with ``resume``).
        embedding_optimizer: ``adam`` (sparse Adam, default) or ``adagrad``.
        embedding_lr: learning rate of the table (default: the model's ``lr``).
        baseline: a heuristic scored on the test edges against the same negatives at the end
            of :meth:`LinkTask.finish <shoal.training.tasks.LinkTask.finish>`, the score a learned model must beat:
            ``adamic-adar`` (default), ``common-neighbours`` or ``none``.
    """

    scorer: str = "dot"
    loss: str = "bce"
    margin: float = 1.0
    num_neg: int = 1
    negatives: str = "uniform"
    eval_negatives: int = 100
    hits_k: int = 50
    embedding_dim: int = 0
    embedding_dir: str | None = None
    embedding_optimizer: str = "adam"
    embedding_lr: float | None = None
    baseline: str = "adamic-adar"

    def __post_init__(self) -> None:
        for name, valid in (
            ("scorer", sorted(SCORERS)),
            ("loss", sorted(LOSSES)),
            ("negatives", sorted(NEGATIVE_SAMPLERS)),
            ("baseline", (*HEURISTICS, "none")),
            ("embedding_optimizer", ("adagrad", "adam")),
        ):
            if getattr(self, name) not in valid:
                raise ValueError(
                    f"unknown {name} {getattr(self, name)!r}; valid names: {', '.join(valid)}"
                )
        if self.embedding_dim < 0:
            raise ValueError(f"embedding_dim must be >= 0, got {self.embedding_dim}")
        for name in ("num_neg", "eval_negatives", "hits_k"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
