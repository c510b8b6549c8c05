"""Importer of plain-text edge lists (:func:`import_text`), and the block-wise text reading
shared with the OGB importer."""

from __future__ import annotations

import gzip
import itertools
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from shoal.data.format import GraphDir
from shoal.data.importers.common import ImportConfig, check_ids, check_out_free, make_writer
from shoal.errors import ShoalInputError

__all__ = ["import_text", "numbered_data_lines", "open_text", "text_edge_chunks"]

_COMMENTS = ("#", "%")
_TEXT_CHUNK_LINES = 1 << 18


def open_text(path: Path):
    try:
        if path.name.endswith(".gz"):
            return gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="")
        return open(path, encoding="utf-8", errors="replace", newline="")
    except FileNotFoundError:
        raise ShoalInputError("input not found", path=path) from None


def numbered_data_lines(f, path: Path) -> Iterator[tuple[list[int], list[str]]]:
    """Chunks of (file line numbers, data lines) with comments and blank lines removed."""
    lineno = 0
    try:
        while True:
            block = list(itertools.islice(f, _TEXT_CHUNK_LINES))
            if not block:
                return
            nums: list[int] = []
            lines: list[str] = []
            for line in block:
                lineno += 1
                t = line.strip()
                if not t or t[0] in _COMMENTS:
                    continue
                nums.append(lineno)
                lines.append(t)
            if lines:
                yield nums, lines
    except (EOFError, OSError, zipfile.BadZipFile) as e:  # gzip truncated / corrupt
        raise ShoalInputError(
            f"cannot read past line {lineno}: {e}",
            path=path,
            fix="the file is truncated or corrupt; download or export it again",
        ) from None


def _delimiter(line: str) -> str | None:
    if "," in line:
        return ","
    if ";" in line:
        return ";"
    return None  # any whitespace


def _parse_int_rows(
    lines: list[str], nums: list[int], delim: str | None, ncols: int, path: Path, what: str
) -> np.ndarray:
    """Parse ``lines`` into an (k, ncols) int64 array; on bad input name the line."""
    try:
        arr = np.loadtxt(
            lines, dtype=np.int64, delimiter=delim, usecols=range(ncols), ndmin=2, comments=None
        )
        if arr.shape == (len(lines), ncols):
            return arr
    except ValueError:
        pass
    # slow path: find the exact offending line (floats with integral values are accepted)
    rows = np.empty((len(lines), ncols), dtype=np.int64)
    for i, (ln, line) in enumerate(zip(nums, lines)):
        toks = line.split(delim) if delim else line.split()
        toks = [t.strip() for t in toks]
        if len(toks) < ncols:
            raise ShoalInputError(
                f"line {ln}: expected {ncols} {what} per line, got {len(toks)} ({line!r})",
                path=path,
                fix="each data line needs src and dst ids; comment other lines out with #",
            )
        for j in range(ncols):
            t = toks[j]
            try:
                rows[i, j] = int(t)
                continue
            except ValueError:
                pass
            try:
                v = float(t)
            except ValueError:
                v = None
            if v is None or not np.isfinite(v) or not float(v).is_integer():
                raise ShoalInputError(
                    f"line {ln}, column {j + 1}: {t!r} is not an integer {what[:-1]}",
                    path=path,
                    fix="node ids must be integers in [0, num_nodes); comment header lines "
                    "out with # (or %)",
                )
            rows[i, j] = int(v)
    return rows


def _count_columns(line: str, delim: str | None) -> int:
    return len(line.split(delim)) if delim else len(line.split())


def _first_wide_line(lines: list[str], delim: str | None, ncols: int) -> int | None:
    """Index of the first line with more than ``ncols`` columns, or None.

    The block's separators are counted at once: if there are exactly ``ncols - 1`` per line no
    line is wider (a line with fewer columns fails the parse anyway). Otherwise (a wider line,
    or a whitespace file with runs of blanks) the lines are split one by one."""
    joined = "\n".join(lines)
    seps = joined.count(delim) if delim else joined.count(" ") + joined.count("\t")
    if seps <= len(lines) * (ncols - 1):
        return None
    return next((i for i, t in enumerate(lines) if _count_columns(t, delim) > ncols), None)


def text_edge_chunks(
    path: Path, ncols: int = 2, what: str = "node ids", extra_columns: str = "error"
) -> Iterator:
    """Yield (file line numbers, (k, ncols) int64 array) blocks from a text file.

    A line with more than ``ncols`` columns (a weight, a timestamp) is an error naming the
    file and the line, unless ``extra_columns == "ignore"``: data is never dropped silently.
    """
    with open_text(path) as f:
        delim: str | None = None
        first = True
        for nums, lines in numbered_data_lines(f, path):
            if first:
                delim = _delimiter(lines[0])
                first = False
            if extra_columns != "ignore":
                i = _first_wide_line(lines, delim, ncols)
                if i is not None:
                    raise ShoalInputError(
                        f"line {nums[i]}: {_count_columns(lines[i], delim)} columns, expected "
                        f"{ncols} ({what}; {lines[i][:80]!r}): the extra columns (a weight or "
                        "timestamp?) would be dropped",
                        path=path,
                        fix="pass --ignore-extra-columns to import only the first "
                        f"{ncols} column{'s' if ncols > 1 else ''}, or remove the others",
                    )
            yield np.asarray(nums), _parse_int_rows(lines, nums, delim, ncols, path, what)


def import_text(
    src: str | os.PathLike, out: str | os.PathLike, config: ImportConfig | None = None
) -> GraphDir:
    """Import a text edge list: one ``src dst`` pair per line.

    Columns are separated by whitespace, commas or semicolons (decided from the first data
    line); a line with further columns (weights, timestamps) is an error naming the line
    unless ``config.extra_columns == "ignore"`` (then only the first two are read); lines starting with ``#`` or
    ``%`` and blank lines are skipped; ``.gz`` files are decompressed on the fly. The file is
    read in blocks of 256 Ki lines, so memory does not depend on its size. A bad line is
    reported with its line number in the file.
    """
    cfg = config or ImportConfig()
    src = Path(src)
    if not src.exists():
        raise ShoalInputError("input not found", path=src)
    check_out_free(out, cfg)
    with make_writer(out, cfg, {"input": str(src), "importer": "text"}) as w:
        for nums, rows in text_edge_chunks(src, extra_columns=cfg.extra_columns):
            check_ids(rows, w.num_nodes, nums, src)
            for s in range(0, rows.shape[0], cfg.chunk_edges):
                w.add_edges(
                    rows[s : s + cfg.chunk_edges], origin=f"{src} (block from line {nums[s]})"
                )
    return GraphDir.open(out)
