"""``plantstore db upgrade|backup``: the schema, and a checked copy of a live SQLite database.

Unlike the other commands ``backup`` does not migrate first: a backup taken before an upgrade
must hold the database as it was, and a path that holds no database is an error, not a new one.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..commandline import settings_for
from ..db.sqlite.backup import BackupError, back_up
from ..db.urls import redacted, sqlite_path
from ..settings import SettingsError, load_settings

POSTGRES_ADVICE = (
    "db backup copies a SQLite file; back up PostgreSQL with its own tools, e.g. "
    "pg_dump --format=custom --file=plantstore.dump {url} (restore with pg_restore), "
    "or pg_basebackup for the whole cluster; see docs/operating.md"
)


@click.group()
def db() -> None:
    """Database schema and backup commands."""


@db.command("upgrade")
@click.pass_context
def db_upgrade(ctx: click.Context) -> None:
    """Create the schema or bring it to the newest revision."""
    settings = settings_for(ctx)
    click.echo(f"Database {redacted(settings.database_url)} is at the newest schema revision.")


@db.command("backup")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
def db_backup(ctx: click.Context, path: Path) -> None:
    """Copy the SQLite database to the new file PATH while it serves, and check the copy."""
    try:
        settings = load_settings(database_url=ctx.find_root().obj["database_url"])
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None
    if settings.backend == "postgresql":
        raise click.ClickException(POSTGRES_ADVICE.format(url=redacted(settings.database_url)))
    source = sqlite_path(settings.database_url)
    try:
        report = back_up(source, path, settings.busy_timeout_ms)
    except BackupError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"Backed up {source} to {report.path} in {report.seconds:.2f} s: "
        f"{report.size_bytes:,} bytes, users {report.users}, plants {report.plants}, integrity ok."
    )
