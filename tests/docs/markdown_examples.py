"""The code blocks of the documentation's Markdown pages, and the markers that say how to run
them (the convention is described in docs/docs-examples.md).

A ``python`` block is a program. MyST comment lines right above it (``% docs-test: ...``)
may say ``skip <why>``, ``continue`` (the block continues the previous program) or
``needs <what>, ...``. ``console`` blocks hold shell commands (``$ ...`` lines, with ``\\``
continuations).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"

#: What a block may need (docs/docs-examples.md says what each one starts).
NEEDS = ("gateway", "htcondor", "kubernetes", "lsf")
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_MARKER = re.compile(r"^%\s*docs-test:\s*(?P<kind>\S+)\s*(?P<rest>.*)$")


class MarkerError(ValueError):
    """A marker that the convention does not know, or one that is incomplete."""


@dataclass
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    markers: list[tuple[str, str]] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(DOCS.parent)}:{self.line}"


@dataclass
class Program:
    """One or more ``python`` blocks that run as one script."""

    blocks: list[Block]
    needs: set[str] = field(default_factory=set)
    skip: str | None = None

    @property
    def code(self) -> str:
        return "\n".join(block.code for block in self.blocks)

    @property
    def where(self) -> str:
        return ", ".join(block.where for block in self.blocks)


def pages() -> list[Path]:
    """Every Markdown page of the documentation, the API reference's included."""
    return sorted(DOCS.rglob("*.md"))


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page``, with the markers right above each."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence = opening["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = _FENCE.match(lines[j])
            if closing and closing["fence"][0] == fence[0] and len(closing["fence"]) >= len(
                    fence) and not closing["info"].strip():
                break
            body.append(lines[j])
            j += 1
        markers: list[tuple[str, str]] = []
        k = i - 1
        while k >= 0 and lines[k].startswith("%"):
            marker = _MARKER.match(lines[k])
            if marker:
                markers.insert(0, (marker["kind"], marker["rest"].strip()))
            k -= 1
        language = opening["info"].strip().split()[0] if opening["info"].strip() else ""
        found.append(Block(page, i + 1, language, "\n".join(body) + "\n", markers))
        i = j + 1
    return found


def programs(page: Path) -> list[Program]:
    """The page's ``python`` blocks as programs, in page order; bad markers raise."""
    result: list[Program] = []
    for block in blocks(page):
        if block.language not in ("python", "py"):
            if block.markers:
                raise MarkerError(f"{block.where}: docs-test markers on a {block.language!r} "
                                  "block: only python blocks run")
            continue
        kinds = [kind for kind, _ in block.markers]
        if "continue" in kinds:
            if not result:
                raise MarkerError(f"{block.where}: 'continue' on the page's first program")
            program = result[-1]
            program.blocks.append(block)
        else:
            program = Program([block])
            result.append(program)
        for kind, rest in block.markers:
            if kind == "skip":
                if not rest:
                    raise MarkerError(f"{block.where}: 'skip' needs a reason: "
                                      "% docs-test: skip <why it cannot run here>")
                program.skip = rest
            elif kind == "needs":
                wanted = {word.strip() for word in rest.split(",") if word.strip()}
                unknown = wanted - set(NEEDS)
                if not wanted or unknown:
                    raise MarkerError(f"{block.where}: needs {rest!r}: name one or more of "
                                      f"{', '.join(NEEDS)}")
                program.needs |= wanted
            elif kind == "continue":
                if rest:
                    raise MarkerError(f"{block.where}: 'continue' takes nothing after it")
            else:
                raise MarkerError(f"{block.where}: unknown docs-test marker {kind!r} "
                                  "(skip, continue, needs)")
    return result


def shell_commands(page: Path) -> list[tuple[Block, list[str]]]:
    """``$ ...`` commands of the page's ``console`` blocks, split into words (up to a
    redirection or pipe)."""
    found = []
    for block in blocks(page):
        if block.language != "console":
            continue
        command: str | None = None
        for line in block.code.splitlines():
            if command is not None:
                command += " " + line.strip()
            elif line.startswith("$ "):
                command = line[2:].strip()
            else:
                continue
            if command.endswith("\\"):
                command = command[:-1].rstrip()
                continue
            found.append((block, _command_words(command)))
            command = None
    return found


def _command_words(command: str) -> list[str]:
    """The words of a shell command up to its first redirection, pipe or separator."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = []
    for word in lexer:
        if word and all(c in "();<>|&" for c in word):
            break
        words.append(word)
    return words
