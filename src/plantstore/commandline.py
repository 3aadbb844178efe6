"""What every ``plantstore`` command shares, whichever feature offers it: its settings (from
the root command's ``--database`` and the environment, the database migrated), the database
opened for one piece of work, and tables and dates as the commands print them.

A bad setting or an unreachable database stops the command with one line (``Error: ...``),
never a traceback.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import click

from .db import Database, StoreOpenError, open_database
from .db.migrate import upgrade
from .errors import PlantstoreError
from .formats import rfc3339
from .settings import Settings, SettingsError, load_settings

T = TypeVar("T")


def settings_for(ctx: click.Context, **overrides: object) -> Settings:
    """The settings of this command, with its database migrated to the newest schema (so any
    command works on a fresh path)."""
    try:
        settings = load_settings(database_url=ctx.find_root().obj["database_url"], **overrides)
        upgrade(settings.database_url)
    except (SettingsError, StoreOpenError) as exc:
        raise click.ClickException(str(exc)) from None
    return settings


def with_database(settings: Settings, work: Callable[[Database], Awaitable[T]]) -> T:
    """Open the database, run ``work`` on it, close it; a database failure is one line."""

    async def run() -> T:
        database = open_database(settings)
        await database.open()
        try:
            return await work(database)
        finally:
            await database.close()

    try:
        return asyncio.run(run())
    except (StoreOpenError, PlantstoreError) as exc:  # PlantstoreError: the database went away
        raise click.ClickException(str(exc)) from None


def when(timestamp: float | None, missing: str | None = None) -> str | None:
    """A stored moment as the commands print it (RFC 3339), or ``missing`` if there is none."""
    return missing if timestamp is None else rfc3339(timestamp)


def echo_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print ``rows`` under ``header`` in columns as wide as their widest cell."""
    table = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(row[column]) for row in table) for column in range(len(header))]
    for row in table:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
