"""The ``plantstore`` command: ``serve``, ``db`` and the command groups each feature offers
(``token``, ``user``, ``webhook``).

Every command migrates the database first, so any of them works on a fresh path; two
excepted: ``db backup`` copies a database as it is, and ``db copy`` makes its target's
schema at the source's revision. A bad setting stops the command with one line
(``Error: ...``), never a traceback.
"""

from __future__ import annotations

import click

from .. import __version__
from ..auth.cli import token
from ..auth.cli_users import user
from ..webhooks.cli import webhook
from .db import db
from .serve import serve


@click.group()
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


for command in (serve, token, user, db, webhook):
    main.add_command(command)

__all__ = ["main"]
