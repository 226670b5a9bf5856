"""Sphinx directives that generate reference tables from the code's one declaration.

- ``hybrid-config``: every key of the packaged ``hybrid/hybrid.yaml`` with its default and
  the comment beside it (the comment is the key's documentation).
- ``hybrid-pool-options``: every pool option of :class:`hybrid.pools.PoolSpec` with its
  field description (the same text as ``add_pool``'s Parameters and ``hybrid render --help``).
- ``hybrid-pool-fields``: the same fields as ``py:attribute`` entries, inside the API
  reference's ``PoolSpec`` (pydantic fields are no class attributes autodoc could find).
- ``hybrid-render``: runs the ``hybrid render`` command line written in its content and shows
  the command and what it printed, so the batch pages' example scripts are the real output
  of the code being documented (jobs staged under ``/home/alice/.cache/hybrid/jobs``).

Two helpers keep the API reference honest under ``nitpicky``:

- attribute, data and property docstrings are plain sentences in this project; napoleon
  would read "What workers dial: ``tls://...``" as a type ("What workers dial") followed by
  a description, so their first line is marked as having no type before napoleon sees it;
- a reference a docstring writes as its module sees the name (``ConfigurationError``,
  ``start`` of a base class, ``JobState`` imported from elsewhere) is resolved by looking the
  name up in that module's or class's namespace and finding where the object is documented.
  What cannot be found that way stays a warning (an error with -W).
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?P<value>[^#]*)(#\s?(?P<doc>.*))?$")
_MORE = re.compile(r"^(?P<indent> *)#\s?(?P<doc>.*)$")


def config_keys(text: str) -> list[tuple[str, str, str]]:
    """``(dotted key, default, documentation)`` for every leaf of the YAML text.

    A key's documentation is its trailing comment plus the comment lines right below it
    that are indented deeper than the key.
    """
    rows: list[list[str]] = []
    path: list[tuple[int, str]] = []
    last: list[str] | None = None
    last_indent = -1
    for line in text.splitlines():
        more = _MORE.match(line)
        if more and last is not None and len(more["indent"]) > last_indent:
            last[2] = (last[2] + " " + more["doc"].strip()).strip()
            continue
        match = _KEY.match(line)
        if not match:
            last = None
            continue
        indent = len(match["indent"])
        while path and path[-1][0] >= indent:
            path.pop()
        path.append((indent, match["key"]))
        value = match["value"].strip()
        if value or match["key"] == "worker-dask-config":
            dotted = ".".join(k for _, k in path)
            last = [dotted, value, (match["doc"] or "").strip()]
            last_indent = indent
            if not (len(path) > 1 and path[-2][1] == "worker-dask-config"):
                rows.append(last)
        else:
            last = None
    return [tuple(r) for r in rows]


def comment_as_rst(text: str) -> str:
    """A YAML comment as reStructuredText: `code` as code, everything else as plain text."""
    parts = text.split("`")
    out = []
    for i, part in enumerate(parts):
        if i % 2 and i < len(parts) - 1:
            out.append(f"``{part}``" if part else "")
        else:
            out.append(re.sub(r"([\\*_|`\[\]])", r"\\\1", part))
    return "".join(out)


class ConfigTable(SphinxDirective):
    """A table of every packaged configuration key."""

    def run(self) -> list[nodes.Node]:
        lines = [".. list-table::", "   :header-rows: 1", "   :widths: 30 15 55", "",
                 "   * - Key", "     - Default", "     - What it does"]
        from hybrid.config import DEFAULTS_FILE

        for key, default, doc in config_keys(DEFAULTS_FILE.read_text()):
            if key == "hybrid":
                continue
            lines += [f"   * - ``{key}``", f"     - ``{default or '(mapping)'}``",
                      f"     - {comment_as_rst(doc) or ' '}"]
        return self._parse(lines)

    def _parse(self, lines: list[str]) -> list[nodes.Node]:
        """Parse the generated reStructuredText, also inside a MyST (Markdown) page, whose
        own nested parse would read it as Markdown."""
        from docutils.parsers.rst import Parser
        from docutils.parsers.rst.states import RSTState
        from docutils.utils import new_document

        if isinstance(self.state, RSTState):
            container = nodes.section()
            self.state.nested_parse(StringList(lines), self.content_offset, container)
            return container.children
        document = new_document(self.get_source_info()[0], self.state.document.settings)
        Parser().parse("\n".join(lines), document)
        return document.children


class PoolOptionsTable(ConfigTable):
    """A table of every pool option."""

    def run(self) -> list[nodes.Node]:
        from hybrid.pools import POOL_OPTIONS, PoolSpec

        lines = [".. list-table::", "   :header-rows: 1", "   :widths: 25 75", "",
                 "   * - Option", "     - What it does"]
        for key in ("system", *POOL_OPTIONS):
            description = PoolSpec.model_fields[key].description or " "
            lines += [f"   * - :py:attr:`~hybrid.PoolSpec.{key}`", f"     - {description}"]
        return self._parse(lines)


class PoolFields(ConfigTable):
    """``py:attribute`` entries for every field of ``PoolSpec`` (inside its autoclass)."""

    def run(self) -> list[nodes.Node]:
        from hybrid.pools import PoolSpec, numpydoc_parameters

        # "key : type" lines of add_pool's own Parameters entries: the same types
        types = dict(re.findall(r"^(\w+) : (.+)$", numpydoc_parameters(skip=()), re.M))
        lines: list[str] = []
        for key, field in PoolSpec.model_fields.items():
            lines.append(f".. py:attribute:: {key}")
            if not field.is_required():
                lines.append(f"   :value: {field.default!r}")
            lines += ["", f"   *{types[key]}*. {field.description or ''}", ""]
        return self._parse(lines)


class RenderExample(ConfigTable):
    """``hybrid render ...`` (the directive's content) and its real output."""

    has_content = True
    option_spec = {"language": lambda text: text.strip()}
    #: Where the example's staged files appear to live (not this machine's home).
    STAGING = "/home/alice/.cache/hybrid/jobs"

    def run(self) -> list[nodes.Node]:
        import shlex

        import dask
        from click.testing import CliRunner
        from sphinx.errors import ExtensionError

        from hybrid.batch.cli import render

        lines = [line.strip().rstrip("\\").strip() for line in self.content if line.strip()]
        command = " ".join(lines)
        words = shlex.split(command)
        if words[:2] != ["hybrid", "render"]:
            raise self.error(f"hybrid-render: the content must be a `hybrid render` command, "
                             f"not {command!r}")
        with dask.config.set({"hybrid.batch.staging-directory": self.STAGING}):
            result = CliRunner().invoke(render, words[2:], prog_name="hybrid render")
        if result.exit_code != 0:
            raise ExtensionError(f"{self.get_location()}: {command} failed "
                                 f"(exit {result.exit_code}):\n{result.output}")
        shown = "$ " + " \\\n      ".join(lines)
        console = nodes.literal_block(shown, shown, language="console")
        output = nodes.literal_block(result.output, result.output,
                                     language=self.options.get("language", "sh"))
        return [console, output]


# ---------------------------------------------------------------------------------------------
# napoleon: attribute docstrings are sentences, not "type: description"
# ---------------------------------------------------------------------------------------------
def mark_untyped_attribute(app: Any, what: str, name: str, obj: Any, options: Any,
                           lines: list[str]) -> None:
    """Give napoleon an empty type before the first line of an attribute's docstring."""
    if what not in ("attribute", "data", "property"):
        return
    for i, line in enumerate(lines):
        if line.strip():
            if not line.lstrip().startswith(":"):
                lines[i] = ": " + line
            return


# ---------------------------------------------------------------------------------------------
# references written as the docstring's module sees the name
# ---------------------------------------------------------------------------------------------
_MISSING = object()


def _lookup(root: Any, dotted: str) -> Any:
    """``root.a.b`` by static lookup (a classmethod stays the same object every time)."""
    obj = root
    for part in dotted.split("."):
        if inspect.ismodule(obj):
            obj = getattr(obj, part, _MISSING)
        else:
            try:
                obj = inspect.getattr_static(obj, part)
            except AttributeError:
                return _MISSING
        if obj is _MISSING:
            return _MISSING
    return obj


def _import(dotted: str) -> Any:
    """The object a full dotted name means (a module, or attributes below the longest one)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # not a module (or one that fails): try a shorter prefix
            continue
        return _lookup(module, ".".join(parts[cut:])) if cut < len(parts) else module
    return _MISSING


def _identifiable(obj: Any) -> bool:
    """Objects whose identity names them: not literals, which may be shared (interned)."""
    return obj is not _MISSING and not isinstance(
        obj, (str, bytes, int, float, bool, tuple, frozenset, type(None)))


class ReferenceIndex:
    """Where each documented object is documented: by identity, and by canonical name."""

    def __init__(self, domain: Any):
        self.by_identity: dict[int, str] = {}
        self.alias: dict[str, str] = {}
        main = {(e.docname, e.node_id): name for name, e in domain.objects.items()
                if not e.aliased}
        for name, entry in domain.objects.items():
            if entry.aliased:
                self.alias[name] = main.get((entry.docname, entry.node_id), name)
                continue
            obj = _import(name)
            if _identifiable(obj):
                self.by_identity.setdefault(id(obj), name)
        self.objects = domain.objects
        self.size = len(domain.objects)

    def documented(self, obj: Any) -> str | None:
        return self.by_identity.get(id(obj)) if _identifiable(obj) else None

    def unalias(self, dotted: str) -> str | None:
        """``hybrid.pools.PoolSpec.python`` -> ``hybrid.PoolSpec.python`` (if documented)."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            head = ".".join(parts[:cut])
            if head in self.alias:
                name = ".".join([self.alias[head], *parts[cut:]])
                return name if name in self.objects else None
        return None


#: The reference index of each running Sphinx application (by ``id(app)``).
_INDEX: dict[int, ReferenceIndex] = {}
_DOCSTRING_OF = re.compile(r"docstring of (?P<name>[\w.]+)")


def _scopes(node: Any) -> list[Any]:
    """Where a name in this reference's docstring is looked up, nearest first: the classes
    and modules of the object the docstring belongs to, then the documented module/class."""
    names = []
    found = _DOCSTRING_OF.search(str(node.source or ""))
    if found:
        parts = found["name"].split(".")
        names += [".".join(parts[:cut]) for cut in range(len(parts), 0, -1)]
    context = [p for p in (node.get("py:module"), node.get("py:class")) if p]
    if context:
        names.append(".".join(context))
    scopes: list[Any] = []
    for name in names:
        obj = _import(name)
        if obj is _MISSING:
            continue
        if inspect.isclass(obj) or inspect.ismodule(obj):
            scopes.append(obj)
        module = getattr(obj, "__module__", None) if not inspect.ismodule(obj) else None
        if isinstance(module, str):
            scopes.append(importlib.import_module(module))
    unique: list[Any] = []
    for scope in scopes:
        if all(scope is not seen for seen in unique):
            unique.append(scope)
    return unique


def _one_member_of_its_classes(module: Any, name: str) -> Any:
    """The attribute ``name`` of the classes defined in ``module``, if it is one object."""
    found = {}
    for value in vars(module).values():
        if inspect.isclass(value) and value.__module__ == module.__name__:
            member = _lookup(value, name)
            if member is not _MISSING:
                found[id(member)] = member
    return next(iter(found.values())) if len(found) == 1 else _MISSING


def resolve_in_scope(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """``missing-reference``: resolve a Python name as the docstring's scope sees it."""
    if node.get("refdomain") != "py":
        return None
    domain = env.get_domain("py")
    # kept in this process only: object identities mean nothing in a pickled environment
    index = _INDEX.get(id(app))
    if index is None or index.size != len(domain.objects):
        index = _INDEX[id(app)] = ReferenceIndex(domain)
    target = node["reftarget"].lstrip("~.").removesuffix("()")
    found = index.unalias(target)
    scopes = _scopes(node) if found is None else []
    for scope in scopes:
        if found is not None:
            break
        found = index.documented(_lookup(scope, target))
        if found is None and inspect.ismodule(scope):
            if f"{scope.__name__}.{target}" in index.objects:
                found = f"{scope.__name__}.{target}"
            else:
                found = index.documented(_one_member_of_its_classes(scope, target))
    if found is None:
        found = index.documented(_import(target))
    if found is None:
        return None
    return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], found,
                               node, contnode)


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("hybrid-config", ConfigTable)
    app.add_directive("hybrid-pool-options", PoolOptionsTable)
    app.add_directive("hybrid-pool-fields", PoolFields)
    app.add_directive("hybrid-render", RenderExample)
    app.connect("autodoc-process-docstring", mark_untyped_attribute, priority=400)
    app.connect("missing-reference", resolve_in_scope)
    return {"parallel_read_safe": True}
