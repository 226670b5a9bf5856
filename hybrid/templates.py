"""Job templates: Jinja files in ``jobtemplates/``, rendered with ``StrictUndefined``.

A user's own directory (``hybrid.templates.directory``) is searched first, so a file there
overrides ours of the same name. Every user value goes through a filter that quotes it for
the language it lands in; a value that cannot be made safe raises :class:`TemplateError`.

Filters: ``sh`` (one shell word), ``sh_join`` (a shell command line), ``env_name`` (a
variable name for ``export``), ``classad`` (an HTCondor ClassAd string literal in a submit
description), ``directive`` (one line of a ``#SBATCH``/``#PBS``/``#BSUB`` directive or a
submit-description line).
Environment values and worker arguments always go to the shell script, never into an
HTCondor submit description, so any string is fine there.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Iterable
from pathlib import Path, PurePath
from typing import Any

import jinja2

from hybrid import config
from hybrid.errors import ConfigurationError, TemplateError


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
    """A value on one batch directive line: line breaks (a second directive) and a trailing
    backslash (a continuation onto the next line) are refused."""
    from hybrid.fields import LINE_BREAKS

    text = _no_control(str(value), "directive")
    if any(mark in text for mark in LINE_BREAKS):
        raise TemplateError(
            f"directive {text!r} contains a line break; give each directive as its own list "
            "item"
        )
    if text.rstrip().endswith("\\"):
        raise TemplateError(f"directive {text!r} ends in a backslash, which continues it onto "
                            "the next line of an HTCondor submit description: remove it")
    return text


def env_name(value: Any) -> str:
    """An environment variable name, checked again where it lands (``export NAME=``)."""
    text = str(value)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        raise TemplateError(f"{text!r} is not an environment variable name")
    return text


def template_directories() -> list[Path]:
    """Where templates are looked up, the user's directory first."""
    directories = []
    user = config.get("templates.directory", None)
    if user:
        path = Path(str(user)).expanduser() if isinstance(user, (str, PurePath)) else None
        if path is None or not path.is_dir():
            raise ConfigurationError("hybrid.templates.directory", user,
                                     "a directory of your own job templates, or null",
                                     "Create the directory or unset the setting.")
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
        sh=shell_quote, sh_join=shell_join, env_name=env_name, classad=classad_string,
        directive=directive_line,
    )
    return env


def render(name: str, **context: Any) -> str:
    """Render template ``name`` with ``context``; a missing variable is an error."""
    env = _environment(tuple(template_directories()))
    template = None
    try:
        template = env.get_template(name)
        return template.render(**context)
    except jinja2.TemplateNotFound:
        where = ", ".join(str(d) for d in template_directories())
        raise TemplateError(f"job template {name!r} not found in {where}") from None
    except jinja2.TemplateError as error:  # a variable it does not have, its syntax
        path = getattr(error, "filename", None) or getattr(template, "filename", None) or name
        line = f", line {error.lineno}" if getattr(error, "lineno", None) else ""
        raise TemplateError(
            f"job template {name!r} ({path}{line}): {error}. Fix the template"
            + (", or unset hybrid.templates.directory to use hybrid's own"
               if config.get("templates.directory", None) else "")) from None
