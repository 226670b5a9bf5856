"""Job templates: Jinja files in ``jobtemplates/``, rendered with ``StrictUndefined``.

A user's own directory (``hybrid.templates.directory``) is searched first, so a file there
overrides ours of the same name. Every user value goes through a filter that quotes it for
the language it lands in; a value that cannot be made safe raises :class:`TemplateError`.

Filters: ``sh`` (one shell word), ``sh_join`` (a shell command line), ``classad`` (an
HTCondor ClassAd string literal in a submit description), ``directive`` (one line of a
``#SBATCH``/``#PBS``/``#BSUB`` directive), ``json`` (a JSON/YAML scalar or mapping).
Environment values and worker arguments always go to the shell script, never into an
HTCondor submit description, so any string is fine there.
"""

from __future__ import annotations

import functools
import json
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jinja2

from hybrid import config
from hybrid.errors import TemplateError


def packaged_template_directory() -> Path:
    """``jobtemplates/`` inside the installed wheel, or at the top of a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "jobtemplates", here.parent / "jobtemplates"):
        if candidate.is_dir():
            return candidate
    raise TemplateError("the packaged jobtemplates/ directory is missing: reinstall hybrid")


def _no_control(value: str, what: str) -> str:
    if "\0" in value:
        raise TemplateError(f"{what}: {value!r} contains a NUL byte, which no job file can hold")
    return value


def shell_quote(value: Any) -> str:
    """One inert shell word (single-quoted when needed)."""
    return shlex.quote(_no_control(str(value), "shell value"))


def shell_join(words: Iterable[Any]) -> str:
    """A shell command line of inert words."""
    return " ".join(shell_quote(w) for w in words)


def classad_string(value: Any) -> str:
    """A ClassAd string literal for a submit description: ``"..."`` with ``\\"`` for quotes.

    What the submit language cannot carry exactly is refused rather than mangled: ``$``
    (macro expansion is recursive, so no escape survives every neighbour), ``\\`` (literal
    in submit-file strings except before a quote) and newlines (they end a command). The
    real schedd reads every accepted value back exactly (tested).
    """
    text = _no_control(str(value), "HTCondor value")
    for bad, why in (("\n", "a newline"), ("\r", "a carriage return"), ("$", "a $"),
                     ("\\", "a backslash")):
        if bad in text:
            raise TemplateError(
                f"HTCondor value {text!r} contains {why}, which an HTCondor submit "
                "description cannot carry exactly: leave it out of names, tags and addresses"
            )
    return '"' + text.replace('"', '\\"') + '"'


def directive_line(value: Any) -> str:
    """A value on one batch directive line: newlines (a second directive) are refused."""
    text = _no_control(str(value), "directive")
    if "\n" in text or "\r" in text:
        raise TemplateError(
            f"directive {text!r} contains a newline; give each directive as its own list item"
        )
    return text


def to_json(value: Any) -> str:
    """JSON text, which is also valid YAML, for manifests."""
    return json.dumps(value)


def template_directories() -> list[Path]:
    """Where templates are looked up, the user's directory first."""
    directories = []
    user = config.get("templates.directory", None)
    if user:
        path = Path(str(user)).expanduser()
        if not path.is_dir():
            raise TemplateError(
                f"hybrid.templates.directory = {str(user)!r} is not a directory: create it or "
                "unset the setting"
            )
        directories.append(path)
    directories.append(packaged_template_directory())
    return directories


@functools.lru_cache(maxsize=8)
def _environment(directories: tuple[Path, ...]) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(d) for d in directories]),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        sh=shell_quote, sh_join=shell_join, classad=classad_string, directive=directive_line,
        json=to_json,
    )
    return env


def render(name: str, **context: Any) -> str:
    """Render template ``name`` with ``context``; a missing variable is an error."""
    env = _environment(tuple(template_directories()))
    try:
        return env.get_template(name).render(**context)
    except jinja2.TemplateNotFound:
        where = ", ".join(str(d) for d in template_directories())
        raise TemplateError(f"job template {name!r} not found in {where}") from None
    except jinja2.UndefinedError as error:
        raise TemplateError(f"job template {name!r}: {error}") from None
