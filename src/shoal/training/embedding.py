"""Learnable node embeddings kept on disk, updated sparsely (graphs without features).

:class:`NodeEmbedding` is an ``(N, D)`` float32 table in a file, read and written by rows
through a memory map (the rows of a batch, never the whole table), initialised in blocks from
a seed (uniform in ``[-1/sqrt(D), 1/sqrt(D)]``, as DGL's ``NodeEmbedding`` examples). Its
optimizers keep their state the same way, in files of the same shape beside it:

- :class:`SparseAdam`: Adam applied only to the rows a batch touched, with a **per-row step
  count** for the bias correction (DGL's ``dgl.optim.SparseAdam``: a row updated rarely is
  corrected for its own updates, not for the run's global step; where every row is updated
  every step this is exactly ``torch.optim.SparseAdam``);
- :class:`SparseAdagrad`: Adagrad on the touched rows (DistDGL, Section 3: sparse embeddings
  with sparse Adagrad).

A batch gathers its rows as a leaf tensor (:meth:`NodeEmbedding.gather`); after
``backward()`` the optimizer's ``step(ids, grad)`` updates those rows in place. Rows of
repeated ids are summed first.

Checkpoints copy the table and the optimizer's state files (:func:`save_tables`, into the
checkpoint directory, atomically) and a resume copies them back (:func:`load_tables`), so a
resumed run continues from exactly the checkpointed rows (the copy costs one sequential pass
over the files per checkpoint).

Not yet: rows go through the memory map (page faults), not the planned direct reads and
writes of the budgeted feature store; tables larger than memory work but rely on the page
cache for speed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import torch

from shoal.utils.diskspace import open_output_memmap

__all__ = ["NodeEmbedding", "SparseAdagrad", "SparseAdam", "load_tables", "save_tables"]

_BLOCK_ROWS = 1 << 16


def _table(path: Path, rows: int, dim: int, dtype=np.float32, fill: float | None = 0.0):
    """A ``(rows, dim)`` memory map at ``path``, created (zero-filled, or left to the caller
    with ``fill=None``) when absent."""
    if path.exists():
        t = np.load(path, mmap_mode="r+")
        if t.shape != (rows, dim):
            raise ValueError(f"{path} holds shape {t.shape}, expected {(rows, dim)}")
        return t
    t = open_output_memmap(path, dtype, (rows, dim))
    if fill is not None and fill != 0.0:
        t[:] = fill
    return t


class NodeEmbedding:
    """An ``(num_nodes, dim)`` table in ``directory/embedding.npy`` (module docstring).

    Args:
        directory: where the table (and its optimizer's state) live; reopened if present.
        num_nodes, dim: the table's shape.
        seed: initialisation seed (default 0).
        stream: tables of one run with different ``stream`` (e.g. one per part) get
            different values (default 0).
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        num_nodes: int,
        dim: int,
        *,
        seed: int = 0,
        stream: int = 0,
    ):
        if num_nodes < 0 or dim < 1:
            raise ValueError(f"need num_nodes >= 0 and dim >= 1, got {num_nodes}, {dim}")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.num_nodes, self.dim = num_nodes, dim
        path = self.dir / "embedding.npy"
        fresh = not path.exists()
        self.weight = _table(path, num_nodes, dim, fill=None)
        if fresh:
            bound = 1.0 / np.sqrt(dim)
            for s in range(0, num_nodes, _BLOCK_ROWS):
                rng = np.random.default_rng([seed, s] if stream == 0 else [seed, stream, s])
                e = min(s + _BLOCK_ROWS, num_nodes)
                self.weight[s:e] = rng.uniform(-bound, bound, size=(e - s, dim))
            self.weight.flush()

    def gather(self, ids: np.ndarray) -> torch.Tensor:
        """The rows of ``ids`` as a new leaf tensor that requires grad."""
        return torch.from_numpy(np.asarray(self.weight[np.asarray(ids, np.int64)])).requires_grad_()

    def flush(self) -> None:
        self.weight.flush()


def _unique_grad(ids: np.ndarray, grad: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    g = grad.detach().numpy() if isinstance(grad, torch.Tensor) else np.asarray(grad)
    ids = np.asarray(ids, np.int64)
    u, inv = np.unique(ids, return_inverse=True)
    if len(u) == len(ids):
        order = np.argsort(ids, kind="stable")
        return ids[order], g[order].astype(np.float32)
    out = np.zeros((len(u), g.shape[1]), np.float32)
    np.add.at(out, inv, g)
    return u, out


class SparseAdam:
    """Adam on the touched rows with per-row steps (module docstring); state in
    ``embedding.adam_m.npy``, ``.adam_v.npy``, ``.adam_step.npy`` beside the table."""

    def __init__(
        self, emb: NodeEmbedding, *, lr: float = 0.01, betas=(0.9, 0.999), eps: float = 1e-8
    ) -> None:
        self.emb, self.lr, self.b1, self.b2, self.eps = emb, lr, betas[0], betas[1], eps
        n, d = emb.num_nodes, emb.dim
        self.m = _table(emb.dir / "embedding.adam_m.npy", n, d)
        self.v = _table(emb.dir / "embedding.adam_v.npy", n, d)
        self.steps = _table(emb.dir / "embedding.adam_step.npy", n, 1, dtype=np.int64)

    def step(self, ids: np.ndarray, grad: torch.Tensor) -> None:
        rows, g = _unique_grad(ids, grad)
        if len(rows) == 0:
            return
        t = self.steps[rows, 0] + 1
        self.steps[rows, 0] = t
        m = self.b1 * self.m[rows] + (1 - self.b1) * g
        v = self.b2 * self.v[rows] + (1 - self.b2) * g * g
        self.m[rows], self.v[rows] = m, v
        c1 = (1 - self.b1 ** t.astype(np.float64))[:, None]
        c2 = (1 - self.b2 ** t.astype(np.float64))[:, None]
        upd = self.lr * (m / c1) / (np.sqrt(v / c2) + self.eps)
        self.emb.weight[rows] = self.emb.weight[rows] - upd.astype(np.float32)

    def flush(self) -> None:
        for a in (self.m, self.v, self.steps):
            a.flush()
        self.emb.flush()

    def tables(self) -> dict[str, np.ndarray]:
        """Every file-backed array of the table and this optimizer, by file name."""
        return {
            "embedding.npy": self.emb.weight,
            "embedding.adam_m.npy": self.m,
            "embedding.adam_v.npy": self.v,
            "embedding.adam_step.npy": self.steps,
        }


class SparseAdagrad:
    """Adagrad on the touched rows; the squared-gradient sums in ``embedding.adagrad.npy``."""

    def __init__(self, emb: NodeEmbedding, *, lr: float = 0.01, eps: float = 1e-10) -> None:
        self.emb, self.lr, self.eps = emb, lr, eps
        self.sum = _table(emb.dir / "embedding.adagrad.npy", emb.num_nodes, emb.dim)

    def step(self, ids: np.ndarray, grad: torch.Tensor) -> None:
        rows, g = _unique_grad(ids, grad)
        if len(rows) == 0:
            return
        s = self.sum[rows] + g * g
        self.sum[rows] = s
        self.emb.weight[rows] = self.emb.weight[rows] - self.lr * g / (np.sqrt(s) + self.eps)

    def flush(self) -> None:
        self.sum.flush()
        self.emb.flush()

    def tables(self) -> dict[str, np.ndarray]:
        return {"embedding.npy": self.emb.weight, "embedding.adagrad.npy": self.sum}


def save_tables(tables: dict[str, np.ndarray], dst: str | os.PathLike) -> None:
    """Copy the file-backed ``tables`` into the directory ``dst`` (a temporary sibling
    renamed into place: a crash leaves the previous copy whole)."""
    dst = Path(dst)
    tmp = dst.with_name(f".{dst.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, t in tables.items():
        t.flush()
        shutil.copyfile(t.filename, tmp / name)
    old = dst.with_name(f".{dst.name}.old{os.getpid()}")
    if dst.exists():
        os.replace(dst, old)
    os.replace(tmp, dst)
    shutil.rmtree(old, ignore_errors=True)


def load_tables(tables: dict[str, np.ndarray], src: str | os.PathLike) -> None:
    """Copy the arrays saved by :func:`save_tables` back into ``tables``, in row blocks."""
    for name, t in tables.items():
        saved = np.load(Path(src) / name, mmap_mode="r")
        if saved.shape != t.shape:
            raise ValueError(f"{Path(src) / name} holds shape {saved.shape}, expected {t.shape}")
        for s in range(0, t.shape[0], _BLOCK_ROWS):
            t[s : s + _BLOCK_ROWS] = saved[s : s + _BLOCK_ROWS]
        t.flush()
