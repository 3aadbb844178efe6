"""Every command's help is plain text: no reStructuredText markup from its docstring."""

from __future__ import annotations

from collections.abc import Iterator

import click
from click.testing import CliRunner

from plantstore.cli import main


def commands(command: click.Command, path: list[str]) -> Iterator[list[str]]:
    yield path
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from commands(sub, [*path, name])


def test_no_help_shows_markup() -> None:
    shown: dict[str, list[str]] = {}
    for path in commands(main, []):
        result = CliRunner().invoke(main, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        shown[" ".join(path)] = [line for line in result.output.splitlines() if "`" in line]
    assert len(shown) > 10
    assert {path: lines for path, lines in shown.items() if lines} == {}
