"""The shape of the package: one direction of dependency, no module too long to read.

Every ``import`` in ``hybrid/`` is read from the source (module level, function level and
``TYPE_CHECKING`` blocks alike): no two modules may reach each other through imports, every
import goes down (or sideways within one floor) of :data:`FLOORS`, and no module is over
:data:`MAX_LINES` lines. The floors are the layering a newcomer reads in the README.
"""

from __future__ import annotations

import ast
import fnmatch
import gc
from pathlib import Path

import pytest


@pytest.fixture(scope="module", autouse=True)
def _finalizers_run_before_parsing() -> None:
    """Run the finalizers of what earlier tests left (dask_gateway's ``Gateway.__del__``) now:
    on Python 3.11 a finalizer that a collection runs inside ``ast.parse`` raises "AST
    constructor recursion depth mismatch" (seen once, after test_secrets, in a subset run)."""
    gc.collect()

PACKAGE = Path(__file__).resolve().parents[1] / "hybrid"
MAX_LINES = 600

#: Ground floor first. A module may import modules of its own floor or of floors below.
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("hybrid.errors", "hybrid.units", "hybrid.checks", "hybrid.systems",
                    "hybrid.scheduler_probe")),
    ("fields", ("hybrid.fields",)),
    ("config", ("hybrid.config", "hybrid")),
    ("lifecycle", ("hybrid.lifecycle", "hybrid.quiet_logs")),
    ("routing and templates", ("hybrid.routing", "hybrid.templates", "hybrid.gpusharing")),
    ("the model", ("hybrid.resources", "hybrid.lifetimes", "hybrid.workerargs", "hybrid.pools")),
    ("the worker command", ("hybrid.worker",)),
    ("batch jobs and staging", ("hybrid.batch.jobs", "hybrid.batch.staging")),
    ("security", ("hybrid.security",)),
    ("batch systems", ("hybrid.batch.base", "hybrid.batch.htcondor", "hybrid.batch.slurm",
                       "hybrid.batch.pbs", "hybrid.batch.lsf", "hybrid.batch.sge",
                       "hybrid.batch.sge_documents",
                       "hybrid.batch.local", "hybrid.batch")),
    ("kubernetes", ("hybrid.kubernetes", "hybrid.kubernetes.*")),
    ("garbage collection", ("hybrid.batch.orphans",)),
    ("the pool manager", ("hybrid.manager", "hybrid.manager.*")),
    ("adaptivity", ("hybrid.adaptive",)),
    ("clients", ("hybrid.annotator",)),
    ("views", ("hybrid.widgets", "hybrid.widgets.*", "hybrid.dashboard", "hybrid.dashboard.*")),
    ("clusters", ("hybrid.cluster", "hybrid.gateway", "hybrid.gateway.*")),
    ("facades and tools", ("hybrid.backends", "hybrid.backends.*", "hybrid.demo",
                           "hybrid.gateway_server", "hybrid.gateway_server.*",
                           "hybrid.admin", "hybrid.admin.*", "hybrid.cli",
                           "hybrid.batch.cli")),
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name."""
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports, at any level of its source.

    ``from hybrid import config`` imports ``hybrid.config`` (not the package's own
    ``__init__``, which Python runs anyway for every submodule)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            submodules = {f"{source}.{a.name}" for a in node.names} & known
            found.update(submodules)
            if len(submodules) < len(node.names) and source in known:
                found.add(source)
    found.discard(name)
    return found


def graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    found = modules()
    known = set(found)
    return {name: imports(name, path, known) for name, path in found.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return groups


def floor_of(name: str) -> int:
    """The floor of a module (the most specific pattern wins: exact names before globs)."""
    for exact in (True, False):
        for level, (_, patterns) in enumerate(FLOORS):
            for pattern in patterns:
                if (pattern == name) if exact else fnmatch.fnmatchcase(name, pattern):
                    return level
    raise LookupError(name)


def test_the_cycle_finder_finds_a_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_reader_sees_function_level_and_type_checking_imports(tmp_path) -> None:
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from hybrid.pools import PoolSpec\n"
                      "def f():\n    from hybrid import config, errors\n"
                      "    import hybrid.batch.base\n")
    known = {"hybrid", "hybrid.pools", "hybrid.config", "hybrid.errors", "hybrid.batch",
             "hybrid.batch.base"}
    assert imports("hybrid.mod", source, known) == {
        "hybrid.pools", "hybrid.config", "hybrid.errors", "hybrid.batch.base"}


def test_no_import_circle_in_the_package() -> None:
    found = cycles(graph())
    assert not found, "modules of hybrid/ that import each other in a circle: " + "; ".join(
        " <-> ".join(group) for group in found)


def test_every_module_has_a_floor_and_imports_only_downward() -> None:
    edges = graph()
    unplaced = sorted(name for name in edges if _placed(name) is None)
    assert not unplaced, f"modules without a floor in tests/test_structure.py: {unplaced}"
    upward = [f"{name} ({FLOORS[floor_of(name)][0]}) imports {target} "
              f"({FLOORS[floor_of(target)][0]})"
              for name, targets in sorted(edges.items()) for target in sorted(targets)
              if floor_of(target) > floor_of(name)]
    assert not upward, "imports that go up a floor:\n" + "\n".join(upward)


def _placed(name: str) -> int | None:
    try:
        return floor_of(name)
    except LookupError:
        return None


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(
    p.relative_to(PACKAGE.parent)))
def test_no_module_over_the_line_limit(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, (f"{path.relative_to(PACKAGE.parent)} has {lines} lines (at "
                                f"most {MAX_LINES}): split it by responsibility")
