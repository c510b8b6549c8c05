"""Learnable node embeddings kept on disk, updated sparsely (graphs without features).

:class:`NodeEmbedding` is an ``(N, D)`` float32 table in a file, read and written by rows
through a memory map, initialised in blocks from a seed (uniform in ``[-1/sqrt(D),
1/sqrt(D)]``, as DGL's ``NodeEmbedding`` examples); its optimizers keep their state in files
of the same shape beside it: :class:`SparseAdam` (per-row step counts for the bias
correction, DGL's ``dgl.optim.SparseAdam``; ``torch.optim.SparseAdam`` where every row is
updated every step) and :class:`SparseAdagrad` (DistDGL, Section 3). A batch gathers its rows
as a leaf tensor (:meth:`NodeEmbedding.gather`); after ``backward()``, ``step(ids, grad)``
updates them in place (repeated ids' gradients summed first). Checkpoints copy the files
(:func:`save_tables`, :func:`load_tables`; docs/linkpred.md#the-pieces). A typed graph's
featureless node types may keep their embeddings in such tables (:class:`TypeTables`,
``--type-embeddings disk``).

Not yet: rows go through the memory map (page faults), not the budgeted store's planned reads.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import torch

from shoal.errors import ShoalInputError
from shoal.graph.blocks import Batch
from shoal.rows import _kernels as K
from shoal.rows.budget import memory_limit
from shoal.utils.diskspace import open_output_memmap

__all__ = [
    "NodeEmbedding",
    "SparseAdagrad",
    "SparseAdam",
    "TablePlan",
    "TableRows",
    "TypeTables",
    "load_tables",
    "save_tables",
    "table_dir",
]

_BLOCK_ROWS = 1 << 16


def table_dir(
    given: str | None, beside: str | os.PathLike, *, resume: bool, own: tuple[str, ...] = ("",)
) -> Path:
    """Where the link task's learned rows live (``--embedding-dir``: ``given``, default
    ``<beside>.emb``); a table another run left in this process's own sub-directories
    (``own``; a rank's parts, which no other rank writes) is refused unless ``resume``."""
    where = Path(given or f"{beside}.emb")
    for d in (where / sub for sub in own):
        if not resume and d.is_dir() and any(d.iterdir()):
            raise ShoalInputError(
                "an embedding table from another run is there",
                path=d,
                fix="remove it, pass --embedding-dir elsewhere, or --resume to continue it",
            )
    return where


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


class _TypedWidth:
    """What the model sees of the tables of ``types`` (sorted), ``dim`` wide."""

    @property
    def given(self) -> list[bool]:
        """Per node type, whether its rows come from a table (the model's ``given``)."""
        mine = set(self.types)
        return [t in mine for t in range(len(self.schema.node_types))]

    def width(self, feature_dim: int) -> int:
        """The rows' width with the tables' rows in them: at least :attr:`dim`."""
        return max(int(feature_dim), self.dim)


class TablePlan(_TypedWidth):
    """Which featureless node types keep their tables on disk, and where (``root/<type>``):
    :meth:`TypeTables.planned`; :meth:`open` makes (or, resuming, reopens) the tables."""

    def __init__(self, config, schema, root: Path, types: list[int]) -> None:
        self.config, self.schema, self.root, self.types = config, schema, root, types
        self.dim = int(config.model.hidden)

    def open(self) -> TypeTables:
        cfg, out = self.config, []
        for t in self.types:
            nt = self.schema.node_types[t]
            emb = NodeEmbedding(
                self.root / nt.name, nt.count, self.dim, seed=cfg.run.seed, stream=t + 1
            )
            out.append((t, emb, SparseAdam(emb, lr=cfg.optim.lr)))
        return TypeTables(self.schema, out)


class TypeTables(_TypedWidth):
    """The featureless node types of a typed graph whose embedding rows live on disk.

    A relational model reads a featureless type's rows from its own ``nn.Embedding``; with
    ``--type-embeddings disk`` each such type ``t`` has a :class:`NodeEmbedding` table instead
    (``count_t`` rows of ``dim`` = the model's hidden width) and the model takes the type as
    ``given`` (:class:`~shoal.nn.relational.RelationalInput`): its rows come in ``x``'s first
    ``dim`` columns, so ``x`` is at least ``dim`` wide (:meth:`width`). Training writes them
    into each batch (:meth:`embed`) and steps them by sparse Adam (:meth:`step`); evaluation
    and ``shoal embed`` read them through :class:`TableRows`; checkpoints copy them
    (:meth:`save`, :meth:`keep_best`).

    Args:
        schema: the graph's :class:`~shoal.data.hetero.HeteroSchema`.
        tables: ``(type index, table, its sparse optimizer or None: read only)``.
    """

    def __init__(self, schema, tables: list[tuple[int, NodeEmbedding, SparseAdam | None]]):
        if not tables:
            raise ValueError("TypeTables needs at least one table")
        dims = {emb.dim for _, emb, _ in tables}
        if len(dims) != 1:
            raise ValueError(f"the tables differ in width: {sorted(dims)}")
        self.schema, self.tables = schema, sorted(tables, key=lambda e: e[0])
        self.dim = dims.pop()
        self._last: list[tuple[SparseAdam | None, np.ndarray, torch.Tensor]] = []

    # ------------------------------------------------------------------ making them
    @staticmethod
    def planned(config, schema, graph_path: str | os.PathLike | None) -> TablePlan | None:
        """Where a run of ``config`` on a typed graph (``schema``) at ``graph_path`` keeps
        which featureless types' tables, or None when they keep their embeddings in the
        model; nothing is written yet (:meth:`TablePlan.open` makes the tables).
        ``config.model.type_embeddings``: ``"disk"``, ``"memory"``, or ``"auto"``: disk when
        the tables and Adam's two moments (``3 * 4 * hidden`` bytes a row) would take over a
        quarter of the memory limit (``--memory``, else the machine's or cgroup's). The
        tables live in ``--embedding-dir`` (default ``<graph>.emb``), one directory per type;
        a table already there is refused unless the run resumes."""
        bare = [t for t, nt in enumerate(schema.node_types) if not nt.feature_dim]
        mode, hidden = config.model.type_embeddings, int(config.model.hidden)
        if mode == "auto" and bare:
            need = 3 * 4 * hidden * sum(int(schema.node_types[t].count) for t in bare)
            limit = config.memory.limit_bytes or memory_limit()[0]
            mode = "disk" if need > limit // 4 else "memory"
        if mode != "disk" or not bare:
            return None
        where = config.link.embedding_dir or (f"{graph_path}.emb" if graph_path else None)
        if where is None:
            raise ShoalInputError(
                "--type-embeddings disk: no directory for the tables (the graph has no path)",
                fix="pass --embedding-dir DIR",
            )
        root = Path(where)
        for t in bare:
            nt = schema.node_types[t]
            if (root / nt.name / "embedding.npy").exists() and not config.checkpoint.resume:
                raise ShoalInputError(
                    f"an embedding table of node type {nt.name!r} from another run is there",
                    path=root / nt.name,
                    fix="remove it, pass --embedding-dir elsewhere, or --resume to continue it",
                )
        return TablePlan(config, schema, root, bare)

    @classmethod
    def saved(cls, schema, directory: str | os.PathLike, dim: int, *, best: bool) -> TypeTables:
        """The tables a run's checkpoint directory holds (read only): every featureless
        type's ``embedding_<type>_best/`` (``best``) or ``embedding_<type>/`` (the last
        checkpoint's)."""
        out = []
        for t, nt in enumerate(schema.node_types):
            if nt.feature_dim:
                continue
            where = Path(directory) / (f"embedding_{nt.name}" + ("_best" if best else ""))
            if not (where / "embedding.npy").exists():
                raise ShoalInputError(
                    f"the run kept node type {nt.name!r}'s embeddings on disk, but the "
                    "checkpoint holds no copy of them",
                    path=where,
                    fix="pass the checkpoint directory of that run (--checkpoint-dir)",
                )
            out.append((t, NodeEmbedding(where, nt.count, int(dim)), None))
        return cls(schema, out)

    # ------------------------------------------------------------------ the model's side
    @property
    def types(self) -> list[int]:
        return [t for t, _, _ in self.tables]

    @property
    def names(self) -> list[str]:
        return [self.schema.node_types[t].name for t in self.types]

    # ------------------------------------------------------------------ training
    def embed(self, batch: Batch) -> Batch:
        """``batch`` (a :class:`~shoal.graph.blocks.Batch` of original ids) with its x
        widened to :meth:`width` and each table's rows of its nodes in place of their zero
        rows (one leaf tensor per table, on the host, that requires grad; x on its device)."""
        x = batch.x
        n_id = np.asarray(batch.mb.n_id)
        kind = self.schema.type_of(n_id)
        w = self.width(x.shape[1])
        if w > x.shape[1]:
            x = torch.nn.functional.pad(x, (0, w - x.shape[1]))
        self._last = []
        for t, emb, opt in self.tables:
            pos = np.flatnonzero(kind == t)
            if not len(pos):
                continue
            ids = n_id[pos] - self.schema.node_types[t].offset
            rows = emb.gather(ids)
            self._last.append((opt, ids, rows))
            h = rows.to(device=x.device, dtype=x.dtype)
            if w > self.dim:
                h = torch.nn.functional.pad(h, (0, w - self.dim))
            x = x.index_copy(0, torch.from_numpy(pos).to(x.device), h)
        return Batch(batch.mb, x, batch.y)

    def step(self) -> None:
        """The sparse step of the rows :meth:`embed` gave the last batch (after its
        ``backward()``)."""
        for opt, ids, rows in self._last:
            if opt is not None and rows.grad is not None:
                opt.step(ids, rows.grad)
        self._last = []

    # ------------------------------------------------------------------ checkpoints
    def _snapshot(self, directory: str | os.PathLike, t: int) -> Path:
        return Path(directory) / f"embedding_{self.schema.node_types[t].name}"

    def _all(self, opt: SparseAdam | None, emb: NodeEmbedding) -> dict[str, np.ndarray]:
        return opt.tables() if opt is not None else {"embedding.npy": emb.weight}

    def save(self, directory: str | os.PathLike) -> None:
        """The tables and their Adam state copied into ``directory/embedding_<type>/``."""
        for t, emb, opt in self.tables:
            save_tables(self._all(opt, emb), self._snapshot(directory, t))

    def load(self, directory: str | os.PathLike) -> None:
        """The copies :meth:`save` made, back into the tables."""
        for t, emb, opt in self.tables:
            load_tables(self._all(opt, emb), self._snapshot(directory, t))

    def keep_best(self, directory: str | os.PathLike | None) -> None:
        """At a new best validation score: each table copied beside itself (``best/``)
        and, with a checkpoint ``directory``, into ``embedding_<type>_best/``."""
        for t, emb, _ in self.tables:
            save_tables({"embedding.npy": emb.weight}, emb.dir / "best")
            if directory:
                save_tables({"embedding.npy": emb.weight}, f"{self._snapshot(directory, t)}_best")

    def restore_best(self) -> None:
        """The tables as :meth:`keep_best` last kept them (with the best weights)."""
        for _, emb, _ in self.tables:
            if (emb.dir / "best" / "embedding.npy").exists():
                load_tables({"embedding.npy": emb.weight}, emb.dir / "best")

    def flush(self) -> None:
        for _, emb, opt in self.tables:
            if opt is not None:
                opt.flush()
            emb.flush()


class TableRows:
    """A typed graph's feature rows (a :class:`~shoal.rows.source.RowSource` in original-id
    order, e.g. :class:`~shoal.rows.typed.TypedRows`) with the rows of the
    :class:`TypeTables`' types read from their tables, in columns ``[:tables.dim]``; ``dim``
    is ``tables.width(base.dim)``. ``normalize``: the base rows are row-normalised as they
    are read (the tables' rows never are). A :class:`RowSource` itself (what exact
    evaluation and ``shoal embed`` read layer 0 from); the tables are read as they are now
    (nothing cached)."""

    def __init__(self, base, tables: TypeTables, *, normalize: bool = False) -> None:
        self.base, self.tables, self.normalize = base, tables, bool(normalize)
        self.dim = tables.width(base.dim)
        self.dtype = np.dtype(base.dtype)
        self.num_rows = int(base.num_rows)
        self.row_bytes = self.dim * self.dtype.itemsize
        self.path = base.path

    @property
    def stats(self):
        return self.base.stats

    def bytes_for(self, ids: np.ndarray) -> int:
        return len(ids) * self.row_bytes

    def read(
        self,
        ids: np.ndarray,
        out: np.ndarray,
        dest: np.ndarray | None = None,
        out2: np.ndarray | None = None,
    ) -> int:
        """As :meth:`RowSource.read <shoal.rows.source.RowSource.read>`."""
        ids = np.asarray(ids, np.int64)
        n = len(ids)
        dest = np.arange(n, dtype=np.int64) if dest is None else np.asarray(dest, np.int64)
        if n == 0:
            return 0
        if self.normalize or self.base.dim != self.dim:  # staged
            buf = np.empty((n, self.base.dim), self.dtype)
            got = self.base.read(ids, buf)
            if self.normalize:
                K._row_normalize(buf, n)
            rows = np.zeros((n, self.dim), self.dtype)
            rows[:, : self.base.dim] = buf
        else:
            got = self.base.read(ids, out, dest, out2)
            rows = None
        kind = self.tables.schema.type_of(ids)
        for t, emb, _ in self.tables.tables:
            sel = np.flatnonzero(kind == t)
            if not len(sel):
                continue
            local = ids[sel] - self.tables.schema.node_types[t].offset
            h = np.zeros((len(sel), self.dim), self.dtype)
            h[:, : self.tables.dim] = emb.weight[local]
            if rows is not None:
                rows[sel] = h
            else:
                _place(out, out2, dest[sel], h)
        if rows is not None:
            _place(out, out2, dest, rows)
        return got

    def close(self) -> None:
        self.tables.flush()
        self.base.close()


def _place(out: np.ndarray, out2: np.ndarray | None, dest: np.ndarray, rows: np.ndarray) -> None:
    """``rows[i]`` into ``out[dest[i]]``, or ``out2[-1 - dest[i]]`` for a negative one."""
    pos = dest >= 0
    out[dest[pos]] = rows[pos]
    if out2 is not None and not pos.all():
        out2[-1 - dest[~pos]] = rows[~pos]
