"""The ``plantstore`` command: ``serve``, ``db`` and the command groups each feature offers
(``token``, ``user``, ``webhook``).

Every command migrates the database first, so any of them works on a fresh path; three
excepted: ``db backup`` copies a database as it is, ``db restore`` puts one back as it was,
and ``db copy`` makes its target's schema at the source's revision. A bad setting, or trouble with the files under the
database (permission denied, a read-only file system, no such directory, a full disk), stops
the command with one line (``Error: ...``), never a traceback.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import click

from .. import __version__
from ..auth.cli import token
from ..auth.cli_users import user
from ..commandline import file_trouble
from ..webhooks.cli import webhook
from .db import db
from .health import health
from .serve import serve


class _Commands(click.Group):
    """The root command: trouble with the files a command works on, wherever it met it, is
    one line. Any other ``OSError`` or SQLite error is a fault of ours and keeps its
    traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (OSError, sqlite3.Error) as exc:
            trouble = file_trouble(exc)
            if trouble is None:
                raise
            raise click.ClickException(trouble) from None


@click.group(cls=_Commands)
@click.version_option(__version__, prog_name="plantstore")
@click.option(
    "--database",
    "database_url",
    metavar="URL",
    help="sqlite:///relative.db, sqlite:////absolute.db or postgresql://user@host/db "
    "[env PLANTSTORE_DATABASE_URL]",
)
@click.pass_context
def main(ctx: click.Context, database_url: str | None) -> None:
    """The Plant Store API service and its operator commands."""
    ctx.obj = {"database_url": database_url}


for command in (serve, health, token, user, db, webhook):
    main.add_command(command)

__all__ = ["main"]
