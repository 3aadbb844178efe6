"""``plantstore db upgrade|backup|restore|copy``: the schema, a checked copy of a live SQLite
database and its way back in place, and a whole deployment carried to another database
(SQLite to PostgreSQL, and back).

Unlike the other commands ``backup`` does not migrate first: a backup taken before an upgrade
must hold the database as it was, and a path that holds no database is an error, not a new one.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click
from click._termui_impl import ProgressBar

from ..commandline import echo_table, settings_for
from ..db.copy import CopyError, CopyReport, copy_database
from ..db.copy.run import Progress
from ..db.failures import StoreOpenError
from ..db.sqlite.backup import BackupError, back_up
from ..db.sqlite.restore import restore
from ..db.urls import backend_of, for_writes, redacted, sqlite_path
from ..settings import Settings, SettingsError, load_settings

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
    settings = _sqlite_settings(ctx)
    source = sqlite_path(settings.database_url)
    try:
        report = back_up(source, path, settings.busy_timeout_ms)
    except BackupError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"Backed up {source} to {report.path} in {report.seconds:.2f} s: "
        f"{report.size_bytes:,} bytes, users {report.users}, plants {report.plants}, integrity ok."
    )


@db.command("restore")
@click.argument("backup", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
def db_restore(ctx: click.Context, backup: Path) -> None:
    """Put the SQLite backup BACKUP in place of the database; the server must be stopped.

    The database as it was is kept beside it, renamed; no -wal or -shm of it stays behind.
    """
    settings = _sqlite_settings(ctx)
    try:
        report = restore(backup, sqlite_path(settings.database_url))
    except BackupError as exc:
        raise click.ClickException(str(exc)) from None
    kept = f"; the database as it was is kept as {report.kept}" if report.kept else ""
    click.echo(
        f"Restored {backup} to {report.database}: users {report.users}, "
        f"plants {report.plants}, integrity ok{kept}."
    )


def _sqlite_settings(ctx: click.Context) -> Settings:
    """The settings, unmigrated (a backup holds the database as it is), of a SQLite database:
    PostgreSQL's own tools are named instead."""
    try:
        settings = load_settings(database_url=ctx.find_root().obj["database_url"])
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None
    if settings.backend == "postgresql":
        raise click.ClickException(POSTGRES_ADVICE.format(url=redacted(settings.database_url)))
    return settings


@db.command("copy")
@click.argument("source_url")
@click.argument("target_url")
@click.option(
    "--batch-rows",
    type=click.IntRange(min=1),
    default=5000,
    show_default=True,
    help="Rows read and written at a time (memory stays bounded by it).",
)
def db_copy(source_url: str, target_url: str, batch_rows: int) -> None:
    """Copy a whole deployment from SOURCE_URL into the empty database TARGET_URL.

    Users, tokens, plants, webhook subscriptions and their undelivered events, sandbox tokens,
    the secrets and every id sequence: the target serves as the source did. The source is read
    as one snapshot, so it may keep serving; writes it takes after the copy starts stay behind.
    """
    try:
        backend_of(source_url)
        target_url = for_writes(target_url)  # several hosts: the one that takes writes
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"Copying {redacted(source_url)} to {redacted(target_url)} ...")
    try:
        with _progress_bar() as (on_start, progress):
            report = copy_database(
                source_url,
                target_url,
                batch_rows=batch_rows,
                on_start=on_start,
                progress=progress,
            )
    except (CopyError, StoreOpenError) as exc:
        raise click.ClickException(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"cannot copy: {exc}") from None
    _report(report)


@contextlib.contextmanager
def _progress_bar() -> Iterator[tuple[Callable[[int], None] | None, Progress | None]]:
    """A bar on a terminal; nothing when the output is a file or a pipe."""
    if not sys.stderr.isatty():
        yield None, None
        return
    with contextlib.ExitStack() as stack:
        bars: list[ProgressBar[int]] = []

        def on_start(total: int) -> None:
            bar = click.progressbar(length=total, label="rows", file=sys.stderr)
            bars.append(stack.enter_context(bar))

        def progress(table: str, rows: int) -> None:
            bars[0].label = table
            bars[0].update(rows)

        yield on_start, progress


def _report(report: CopyReport) -> None:
    echo_table(
        ("table", "source", "copied", "target"),
        [
            (count.table, f"{count.source:,}", f"{count.copied:,}", f"{count.target:,}")
            for count in report.tables
        ],
    )
    rate = report.rows / report.seconds if report.seconds else 0.0
    click.echo(
        f"Copied {report.rows:,} rows at schema revision {report.revision} in "
        f"{report.seconds:.1f} s ({rate:,.0f} rows/s); every count matches the source."
    )
