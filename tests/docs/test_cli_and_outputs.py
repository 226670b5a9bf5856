"""The command line as the docs show it: every ``--help`` has an example, every ``$ hybrid``
command in the docs is a real command with real options, and the output the docs show is
what the code prints (the dev gateway's banner, ``hybrid demo``'s report)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hybrid.cli import cli
from tests.docs.markdown_examples import DOCS, Block, blocks, pages, shell_commands


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path of the ``hybrid`` command line, groups included."""
    found = [path]
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        if isinstance(command, click.Group):
            found += _commands(command, (*path, name))
        else:
            found.append((*path, name))
    return found


@pytest.mark.parametrize("path", _commands(cli), ids=lambda p: " ".join(("hybrid", *p)))
def test_every_help_has_an_example(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"], prog_name="hybrid")
    assert result.exit_code == 0, result.output
    _, _, examples = result.output.partition("Examples:")
    shown = [line.strip() for line in examples.splitlines() if line.strip()]
    prefix = " ".join(("hybrid", *path))
    assert any(line.startswith(prefix) for line in shown), (
        f"`{prefix} --help` shows no example: add an epilog with 'Examples:' and a "
        f"`{prefix} ...` line\n{result.output}")


def _parse(words: list[str]) -> None:
    """Parse ``hybrid ...`` words as the command line would, without running anything."""
    command: click.Command = cli
    context = cli.make_context("hybrid", words[1:])
    while isinstance(command, click.Group):
        args = [*context._protected_args, *context.args]
        if not args:
            return
        name, command, rest = command.resolve_command(context, args)
        try:
            context = command.make_context(name, rest, parent=context)
        except click.BadParameter as error:
            # a path that exists at a site, not here: the option itself is real
            if isinstance(getattr(error.param, "type", None), (click.Path, click.File)):
                return
            raise


def _hybrid_commands() -> list[tuple[Block, list[str]]]:
    found = []
    for page in pages():
        for block, words in shell_commands(page):
            if words[:2] == ["dask", "hybrid"]:
                words = words[1:]
            synopsis = any(word.startswith("[") for word in words)  # `[--port N]` notation
            if words and words[0] == "hybrid" and not synopsis:
                found.append((block, words))
    return found


@pytest.mark.parametrize(("block", "words"), _hybrid_commands(),
                         ids=lambda v: v.where if isinstance(v, Block) else " ".join(v)[:60])
def test_every_hybrid_command_in_the_docs_is_real(block: Block, words: list[str]) -> None:
    try:
        _parse(words)
    except click.exceptions.Exit:
        pass  # --help, --version
    except click.ClickException as error:
        pytest.fail(f"{block.where}: `{' '.join(words)}`: {error.format_message()}",
                    pytrace=False)


def _text_after(page: Path, command: str) -> str:
    """The ``text`` block that follows the console block running ``command``."""
    found = blocks(page)
    for i, block in enumerate(found):
        if block.language == "console" and f"$ {command}" in block.code:
            following = found[i + 1]
            assert following.language == "text", f"{following.where}: expected the output"
            return following.code
    raise AssertionError(f"{page}: no console block with `$ {command}`")


def test_the_walkthrough_shows_the_banner_hybrid_gateway_dev_prints() -> None:
    from hybrid.gateway_server.dev import DevGateway

    shown = _text_after(DOCS / "gateway-walkthrough.md",
                        "hybrid gateway dev --port 8000 --proxy-port 8786 --password "
                        "dev-password")
    dev = DevGateway(address="http://127.0.0.1:8000", proxy_address="gateway://127.0.0.1:8786",
                     username="alice", password="dev-password", state_dir=Path("/unused"),
                     pid=4242, process=None, temporary_state=True)
    assert shown == dev.banner()


def _shape(line: str) -> str:
    """A report line with what changes between runs masked: numbers, which workers."""
    return re.sub(r"\d+(\.\d+)?", "#", re.sub(r"ran on .*", "ran on <workers>", line))


def test_the_quickstart_shows_what_hybrid_demo_prints(tmp_path: Path) -> None:
    shown = _text_after(DOCS / "quickstart.md", "hybrid demo")
    hybrid = Path(sys.executable).parent / "hybrid"
    result = subprocess.run([str(hybrid), "demo", "--no-progress"], capture_output=True,
                            text=True, timeout=240, cwd=tmp_path, stdin=subprocess.DEVNULL,
                            env={"PATH": f"{hybrid.parent}:/usr/bin:/bin",
                                 "DASK_TEMPORARY_DIRECTORY": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert [_shape(x) for x in result.stdout.splitlines()] == [
        _shape(x) for x in shown.splitlines()]
    # the page shows no log lines: the demo prints none unless asked (--verbose)
    noise = [line for line in result.stderr.splitlines() if " INFO " in line]
    assert noise == [], "\n".join(noise[:10])
