"""Architecture rules of ``src/shoal`` (specified in ``docs/architecture.md``).

- layering: no module imports a package of a higher layer than its own, function-local imports
  included; the layer of each package is read from the table of ``docs/architecture.md``;
- no import cycle between modules (imports executed at import time), nor between packages
  (all imports, function-local ones included);
- every module imports in a fresh interpreter;
- no ``# fmt: skip`` / ``# fmt: off``: the formatter lays the code out (size is handled by
  splitting modules by concept, not by packing lines).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
PKG = SRC / "shoal"
DOC = REPO / "docs" / "architecture.md"


# ------------------------------------------------------------------ the modules of src/shoal


def module_name(path: Path) -> str:
    """``src/shoal/a/b.py`` -> ``shoal.a.b``; ``src/shoal/a/__init__.py`` -> ``shoal.a``."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> dict[str, Path]:
    """Every module of src/shoal: name -> path (``__pycache__`` and data folders skipped)."""
    return {module_name(p): p for p in sorted(PKG.rglob("*.py")) if "__pycache__" not in p.parts}


MODULES = source_files()


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def package_of(name: str) -> str:
    """The top-level package (a row of the layer table) that module ``name`` belongs to:
    ``shoal`` for ``shoal/__init__.py``, ``cli`` for ``shoal/__main__.py``, ``errors`` for
    ``shoal/errors.py``, ``X`` for ``shoal.X...``."""
    parts = name.split(".")
    if len(parts) == 1:
        return "shoal"
    if parts[1] == "__main__":
        return "cli"
    return parts[1]


def layer_table() -> dict[str, int]:
    """``{package: layer}`` from the ``layer | package | holds`` table of the doc."""
    row = re.compile(r"^\|\s*(\d+)\s*\|\s*`([\w.]+)`\s*\|")
    table = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = row.match(line)
        if m:
            table[m.group(2)] = int(m.group(1))
    return table


# ------------------------------------------------------------------ the imports


@dataclass(frozen=True)
class Import:
    importer: str  # module name
    line: int
    target: str  # imported shoal module (resolved to a module where it names one)
    at_import_time: bool  # executed when the importer is imported (not in a function body)


def resolve(base: str, names: list[str]) -> list[str]:
    """The modules ``from base import names`` imports: ``base.name`` for each name that is a
    module of src/shoal, and ``base`` itself for the others (or when there are none)."""
    out = [f"{base}.{n}" for n in names if f"{base}.{n}" in MODULES]
    if len(out) < len(names) or not names:
        out.append(base)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str) -> Iterator[Import]:
    """Every import of a shoal module in module ``name``: absolute and relative, module-level
    and inside functions (``if TYPE_CHECKING:`` blocks are skipped)."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if is_package(name) else name.rpartition(".")[0]

    def visit(node: ast.AST, in_function: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                yield from (i for s in child.orelse for i in visit_stmt(s, in_function))
                continue
            yield from visit_stmt(child, in_function)

    def visit_stmt(node: ast.AST, in_function: bool) -> Iterator[Import]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "shoal" or alias.name.startswith("shoal."):
                    yield Import(name, node.lineno, alias.name, not in_function)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base == "shoal" or base.startswith("shoal."):
                for target in resolve(base, [a.name for a in node.names if a.name != "*"]):
                    yield Import(name, node.lineno, target, not in_function)
        else:
            inner = in_function or isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            yield from visit(node, inner)

    yield from visit(tree, False)


ALL_IMPORTS = [imp for name in MODULES for imp in imports_of(name)]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None when it is acyclic."""
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(graph, white)
    stack: list[str] = []

    def dfs(u: str) -> list[str] | None:
        color[u] = grey
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if color.get(v, white) == grey:
                return stack[stack.index(v) :] + [v]
            if color.get(v, white) == white:
                found = dfs(v)
                if found:
                    return found
        stack.pop()
        color[u] = black
        return None

    for node in sorted(graph):
        if color[node] == white:
            found = dfs(node)
            if found:
                return found
    return None


def rel(name: str) -> str:
    return str(MODULES[name].relative_to(REPO))


# ------------------------------------------------------------------ tests


def test_layer_table_covers_every_package():
    layers = layer_table()
    packages = {package_of(name) for name in MODULES}
    assert packages <= layers.keys(), (
        f"packages missing from the layer table of {DOC.relative_to(REPO)}: "
        f"{sorted(packages - layers.keys())}"
    )
    assert not layers.keys() - packages, (
        f"the layer table of {DOC.relative_to(REPO)} names packages that do not exist: "
        f"{sorted(layers.keys() - packages)}"
    )


def test_no_import_of_a_higher_layer():
    layers = layer_table()
    bad = []
    for imp in ALL_IMPORTS:
        src, dst = package_of(imp.importer), package_of(imp.target)
        if layers[dst] > layers[src]:
            where = "" if imp.at_import_time else " (function-local)"
            bad.append(
                f"{rel(imp.importer)}:{imp.line} imports {imp.target}{where}: "
                f"{src} (layer {layers[src]}) -> {dst} (layer {layers[dst]})"
            )
    assert not bad, "imports of a higher layer:\n" + "\n".join(bad)


def module_graph() -> dict[str, set[str]]:
    """Modules -> the shoal modules importing them executes: each imported module and its
    parent packages' ``__init__``, except the importer's own parents (already being
    imported when the importer runs). Only imports executed at import time."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for imp in ALL_IMPORTS:
        if not imp.at_import_time:
            continue
        own_parents = {
            imp.importer.rsplit(".", k)[0] for k in range(1, imp.importer.count(".") + 1)
        }
        parts = imp.target.split(".")
        implied = {".".join(parts[:k]) for k in range(1, len(parts))} - own_parents
        for target in implied | {imp.target}:
            if target != imp.importer and target in MODULES:
                graph[imp.importer].add(target)
    return graph


def test_no_module_import_cycle():
    cycle = find_cycle(module_graph())
    assert cycle is None, "module import cycle: " + " -> ".join(cycle)


def test_no_package_import_cycle():
    graph: dict[str, set[str]] = {}
    for imp in ALL_IMPORTS:
        src, dst = package_of(imp.importer), package_of(imp.target)
        graph.setdefault(src, set())
        graph.setdefault(dst, set())
        if src != dst:
            graph[src].add(dst)
    cycle = find_cycle(graph)
    assert cycle is None, "package import cycle (function-local imports included): " + (
        " -> ".join(cycle)
    )


#: one interpreter that imports shoal's third-party dependencies once, then forks a child per
#: batch of modules (argv: a JSON list of batches) and prints each child's exit code and
#: stderr as JSON: every child is fresh as to shoal, and none pays torch's import again
IMPORT_FORKED = """
import importlib, json, os, sys, tempfile, traceback
import numpy, numba, scipy.sparse, torch, torch.distributed, torch_geometric  # the heavy ones
out = []
for names in json.loads(sys.argv[1]):
    with tempfile.TemporaryFile("w+") as err:
        pid = os.fork()
        if pid == 0:
            os.dup2(err.fileno(), 2)
            code = 0
            for name in names:
                try:
                    importlib.import_module(name)
                except BaseException:
                    print(f"importing {name}:", file=sys.stderr)
                    traceback.print_exc()
                    code = 1
                    break
            sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        err.seek(0)
        out.append([names, os.waitstatus_to_exitcode(status), err.read()])
print(json.dumps(out))
"""


def _import_forked(batches: list[list[str]]) -> list[tuple[list[str], int, str]]:
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_FORKED, json.dumps(batches)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [tuple(r) for r in json.loads(proc.stdout)]


def leaves_first(names: list[str], graph: dict[str, set[str]]) -> list[str]:
    """``names`` ordered so that each module comes after the modules of ``names`` it imports
    (a topological order of ``graph``, which is acyclic; ties by name)."""
    order: list[str] = []
    done: set[str] = set()

    def place(name: str) -> None:
        if name in done:
            return
        done.add(name)
        for dep in sorted(graph[name]):
            if dep in names:
                place(dep)
        order.append(name)

    for name in sorted(names):
        place(name)
    return order


@pytest.mark.slow
def test_every_module_imports_in_a_fresh_interpreter():
    """Every module of src/shoal (``__main__`` excluded) imports in a fresh interpreter.

    One interpreter per module would be the strictest check, but it costs a torch import
    (~3 s of CPU) per module: about 100 interpreters took 270 s on the 2-core machine, two at a
    time. So each top-level package gets one process, forked from an interpreter that imported
    shoal's third-party dependencies (numpy, numba, scipy, torch, PyG) and nothing of shoal, which
    imports all the package's modules, leaf modules first: each module is imported by its own
    statement after the package's modules it depends on and before those that depend on it,
    so when a module runs, the modules of its package already loaded are mostly ones it imports
    anyway (the state a fresh ``import`` of it would give), a module the package ``__init__``
    does not load (lazily imported ones) is still imported, and a failure names the module
    that has it. Python always runs the parent packages' ``__init__`` first, so no order could
    make every module the entry point; import cycles are caught statically by
    :func:`test_no_module_import_cycle`. The first failing module of a package stops its
    process (later imports would run in a broken state).
    """
    import pkgutil

    names = sorted(
        info.name
        for info in pkgutil.walk_packages([str(PKG)], prefix="shoal.")
        if not info.name.endswith("__main__")
    )
    names.insert(0, "shoal")
    expected = sorted(n for n in MODULES if not n.endswith("__main__"))
    assert names == expected, (
        "pkgutil.walk_packages and the files of src/shoal disagree (a folder without "
        f"__init__.py?): {sorted(set(names) ^ set(expected))}"
    )
    graph = module_graph()
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(package_of(name), []).append(name)
    batches = [leaves_first(group, graph) for _, group in sorted(groups.items())]
    t0 = time.perf_counter()
    results = _import_forked(batches)
    seconds = time.perf_counter() - t0
    print(f"{len(names)} modules in {len(batches)} forked interpreters: {seconds:.1f} s")
    bad = [f"{' '.join(batch)} (exit {rc}):\n{err.strip()}" for batch, rc, err in results if rc]
    assert not bad, "modules failing to import in a fresh interpreter:\n" + "\n\n".join(bad)


def test_no_formatter_suppression():
    """Code is laid out by the formatter: no ``# fmt: skip`` / ``# fmt: off`` packing lines
    together (a long module or function is split by concept instead)."""
    bad = [
        f"{rel(name)}:{i}"
        for name, path in MODULES.items()
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"#\s*fmt:\s*(skip|off)", line)
    ]
    assert not bad, "formatter suppressed at:\n" + "\n".join(bad)
