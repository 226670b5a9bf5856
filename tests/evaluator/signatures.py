"""openff-evaluator's public constructors beside hybrid's, parameter by parameter.

openff-evaluator's side is read from its own modules (``upstream/backends``, vendored
unchanged) with :mod:`ast`: they import openff-evaluator's internals, so they are never
imported. hybrid's side is :func:`inspect.signature` of the classes users import.
``python -m tests.evaluator.signatures`` prints the table docs/openff-evaluator.md carries;
test_signatures.py checks the rules and that the page carries this very table.
"""

from __future__ import annotations

import ast
import inspect
import sys
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).resolve().parent / "upstream" / "backends"
MODULES = ("backends.py", "dask.py", "dask_kubernetes.py")
#: Where each openff-evaluator class is in hybrid.
OURS = {
    "ComputeResources": "hybrid.resources",
    "QueueWorkerResources": "hybrid.resources",
    "PodResources": "hybrid.resources",
    "CalculationBackend": "hybrid.backends",
    "BaseDaskBackend": "hybrid.backends",
    "BaseDaskJobQueueBackend": "hybrid.backends",
    "DaskLSFBackend": "hybrid.backends",
    "DaskPBSBackend": "hybrid.backends",
    "DaskSLURMBackend": "hybrid.backends",
    "DaskLocalCluster": "hybrid.backends",
    "AccessMode": "hybrid.backends.kubernetes",
    "BaseKubernetesVolume": "hybrid.backends.kubernetes",
    "KubernetesSecret": "hybrid.backends.kubernetes",
    "KubernetesPersistentVolumeClaim": "hybrid.backends.kubernetes",
    "KubernetesEmptyDirVolume": "hybrid.backends.kubernetes",
    "BaseDaskKubernetesBackend": "hybrid.backends.kubernetes",
    "DaskKubernetesBackend": "hybrid.backends.kubernetes",
    "DaskKubernetesExistingBackend": "hybrid.backends.kubernetes",
}
POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
KEYWORD = inspect.Parameter.KEYWORD_ONLY


@dataclass
class Theirs:
    """One openff-evaluator class as its source declares it."""

    name: str
    bases: list[str]
    #: ``(name, kind, default as source text)`` of its own ``__init__`` (``None``: none).
    init: list[tuple[str, Any, str | None]] | None
    #: Annotated class attributes (pydantic fields) and enum members, in order.
    fields: list[tuple[str, str | None]] = field(default_factory=list)
    #: Nested classes (``ComputeResources.GPUToolkit``).
    nested: dict[str, Theirs] = field(default_factory=dict)


def _field_default(value: ast.expr | None) -> str | None:
    """A pydantic field's default as source text (``None``: required)."""
    if isinstance(value, ast.Call) and ast.unparse(value.func) == "Field":
        given = value.args[:1] or [k.value for k in value.keywords if k.arg == "default"]
        value = given[0] if given else None
    if value is None or (isinstance(value, ast.Constant) and value.value is Ellipsis):
        return None
    return ast.unparse(value)


def _read(node: ast.ClassDef) -> Theirs:
    theirs = Theirs(node.name, [ast.unparse(b) for b in node.bases], None)
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            args = item.args
            defaults = [None] * (len(args.args) - len(args.defaults)) + list(args.defaults)
            theirs.init = [(a.arg, POSITIONAL, None if d is None else ast.unparse(d))
                           for a, d in zip(args.args, defaults, strict=True)][1:]
            theirs.init += [(a.arg, KEYWORD, None if d is None else ast.unparse(d))
                            for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            theirs.fields.append((item.target.id, _field_default(item.value)))
        elif isinstance(item, ast.Assign) and isinstance(item.targets[0], ast.Name):
            theirs.fields.append((item.targets[0].id, ast.unparse(item.value)))
        elif isinstance(item, ast.ClassDef):
            theirs.nested[item.name] = _read(item)
    return theirs


def evaluator_classes() -> dict[str, Theirs]:
    """Every public class of openff-evaluator's backend modules, by name."""
    classes = {}
    for module in MODULES:
        tree = ast.parse((SOURCE / module).read_text())
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                classes[node.name] = _read(node)
    return classes


def _is_model(name: str, classes: dict[str, Theirs]) -> bool:
    theirs = classes.get(name)
    return theirs is not None and any(b == "BaseModel" or _is_model(b, classes)
                                      for b in theirs.bases)


def evaluator_parameters(name: str, classes: dict[str, Theirs]) -> list[tuple[str, Any, Any]]:
    """The parameters openff-evaluator's ``name(...)`` takes: its ``__init__``'s (inherited
    when it has none), or, for a pydantic model, its fields (keyword-only)."""
    theirs = classes[name]
    if _is_model(name, classes):
        inherited = [p for b in theirs.bases if b in classes
                     for p in evaluator_parameters(b, classes)]
        own = [(f, KEYWORD, d) for f, d in theirs.fields]
        names = {f for f, _, _ in own}
        return [p for p in inherited if p[0] not in names] + own
    if theirs.init is not None:
        return theirs.init
    for base in theirs.bases:
        if base in classes:
            return evaluator_parameters(base, classes)
    return []


def our_class(name: str) -> Any:
    import importlib

    return getattr(importlib.import_module(OURS[name]), name)


def our_parameters(cls: type) -> list[tuple[str, Any, Any]]:
    """hybrid's ``cls(...)`` parameters (``**options`` as one keyword-only entry). A pydantic
    field the model requires has no default, whatever its ``__init__`` says; ``kind``, the
    volumes' tag in plain data, is set by the class itself."""
    fields = getattr(cls, "model_fields", {})
    out = []
    for p in inspect.signature(cls).parameters.values():
        if p.name == "kind" or p.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            out.append((f"**{p.name}", KEYWORD, inspect.Parameter.empty))
            continue
        required = p.name in fields and fields[p.name].is_required()
        out.append((p.name, p.kind, inspect.Parameter.empty if required else p.default))
    return out


def _same_default(theirs: str | None, ours: Any) -> bool:
    if theirs is None:
        return ours is inspect.Parameter.empty
    try:
        return ast.literal_eval(theirs) == ours
    except ValueError:
        pass
    if isinstance(ours, Enum):
        return theirs.rsplit(".", 1)[-1] == ours.name
    return False


def _shown(value: Any) -> str:
    if isinstance(value, Enum):
        return f"{type(value).__name__}.{value.name}"
    return "no default" if value is inspect.Parameter.empty else repr(value)


@dataclass
class Comparison:
    """One class: what is the same, what hybrid adds, what differs."""

    name: str
    #: openff-evaluator's positional parameters, in order (hybrid's first ones too, if same).
    positional: list[str]
    keywords: list[str]
    missing: list[str]
    misplaced: list[str]
    #: hybrid's own parameters, and those of them that are not keyword-only.
    added: list[str]
    added_positional: list[str]
    defaults: list[tuple[str, str, str]]
    #: For enums: members (values) openff-evaluator has and hybrid lacks.
    missing_members: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.misplaced or self.added_positional
                    or self.missing_members)


def _members(theirs: Theirs) -> list[str]:
    return [ast.literal_eval(value) for _, value in theirs.fields]


def compare(name: str, classes: dict[str, Theirs] | None = None) -> Comparison:
    """openff-evaluator's ``name`` beside hybrid's."""
    classes = classes or evaluator_classes()
    ours = our_class(name)
    if issubclass(ours, Enum):
        values = {m.value for m in ours}
        return Comparison(name, [], [], [], [], [], [], [],
                          [v for v in _members(classes[name]) if v not in values])
    theirs = evaluator_parameters(name, classes)
    mine = our_parameters(ours)
    by_name = {n: (k, d) for n, k, d in mine}
    positional = [n for n, k, _ in theirs if k is POSITIONAL]
    our_positional = [n for n, k, _ in mine if k is POSITIONAL]
    missing = [n for n, _, _ in theirs if n not in by_name]
    misplaced = [n for i, n in enumerate(positional)
                 if n in by_name and our_positional[i:i + 1] != [n]]
    added = [n for n, _, _ in mine if n not in {t for t, _, _ in theirs}]
    added_positional = [n for n in added if by_name[n][0] is POSITIONAL]
    defaults = [(n, d if d is not None else "no default", _shown(by_name[n][1]))
                for n, _, d in theirs if n in by_name and not _same_default(d, by_name[n][1])]
    comparison = Comparison(name, positional, [n for n, k, _ in theirs if k is KEYWORD],
                            missing, misplaced, added, added_positional, defaults)
    for nested, enum in classes[name].nested.items():
        values = {m.value for m in getattr(ours, nested)}
        comparison.missing_members += [f"{nested}.{v}" for v in _members(enum)
                                       if v not in values]
    return comparison


def compare_all() -> list[Comparison]:
    """Every public openff-evaluator class (a class hybrid lacks fails in :func:`compare`)."""
    classes = evaluator_classes()
    return [compare(name, classes) for name in classes]


def _code(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names) or "none"


def table() -> str:
    """The Markdown table of docs/openff-evaluator.md, from :func:`compare_all`."""
    rows = ["| Class | openff-evaluator's parameters, the same in hybrid | hybrid adds "
            "(keyword-only) | Defaults that differ (openff-evaluator → hybrid) |",
            "| --- | --- | --- | --- |"]
    for c in compare_all():
        if not (c.positional or c.keywords or c.added):
            rows.append(f"| `{c.name}` | the same members | none | |")
            continue
        same = "; ".join(part for part in (
            c.positional and _code(c.positional) + " (positional, in this order)",
            c.keywords and "keywords " + _code(c.keywords)) if part)
        defaults = "; ".join(f"`{n}`: `{a}` → `{b}`" for n, a, b in c.defaults)
        rows.append(f"| `{c.name}` | {same} | {_code(c.added)} | {defaults} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table())
