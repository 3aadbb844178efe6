"""The copy from start to end: check both ends, make the target's schema, move every table in
reference order, carry the sequences on, and commit only if every count matches the source's.

A target that holds any data is refused before anything is written; a copy that fails leaves
the target as empty as it found it (its schema made), so it can simply be run again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from ..failures import describe_failure
from ..migrate import current_revision, upgrade
from ..urls import backend_of, redacted, sqlite_path
from . import postgres, sqlite
from .endpoints import MADE_BY_SCHEMA, Source, Target, in_reference_order

Progress = Callable[[str, int], None]  # a table, and how many more of its rows were copied

# What PostgreSQL at either end raises when it cannot be reached or used as asked (a database
# that does not exist, no server of the asked ``target_session_attrs``): told in one line.
_POSTGRES_FAILURES = (
    TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
)


class CopyError(Exception):
    """The copy cannot start or did not hold; nothing was committed on the target."""


@dataclass(frozen=True)
class TableCount:
    table: str
    source: int
    copied: int
    target: int


@dataclass(frozen=True)
class CopyReport:
    revision: str
    tables: list[TableCount]
    seconds: float

    @property
    def rows(self) -> int:
        return sum(count.copied for count in self.tables)


def copy_database(
    source_url: str,
    target_url: str,
    *,
    batch_rows: int = 5000,
    on_start: Callable[[int], None] | None = None,
    progress: Progress | None = None,
) -> CopyReport:
    """Copy every row of ``source_url`` into the empty database at ``target_url``.

    ``on_start`` hears how many rows there are to copy, ``progress`` each batch as it goes.
    """
    try:
        return _copy_database(source_url, target_url, batch_rows, on_start, progress)
    except _POSTGRES_FAILURES as exc:
        raise CopyError(f"cannot copy: {describe_failure(exc)}") from exc


def _copy_database(
    source_url: str,
    target_url: str,
    batch_rows: int,
    on_start: Callable[[int], None] | None,
    progress: Progress | None,
) -> CopyReport:
    started = time.monotonic()
    if _same(source_url, target_url):
        raise CopyError("the source and the target are the same database")
    revision = current_revision(source_url)
    if revision is None:
        raise CopyError(f"{redacted(source_url)} holds no plantstore database")
    _refuse_unless_empty(target_url, revision)
    upgrade(target_url, revision)
    counts = asyncio.run(_copy(source_url, target_url, batch_rows, on_start, progress))
    return CopyReport(revision, counts, time.monotonic() - started)


async def _copy(
    source_url: str,
    target_url: str,
    batch_rows: int,
    on_start: Callable[[int], None] | None,
    progress: Progress | None,
) -> list[TableCount]:
    source = await _open_source(source_url)
    try:
        tables = await source.tables()
        order = in_reference_order(await source.references())
        target = await _open_target(target_url)
        try:
            sources = {table: await source.count(table) for table in order}
            if on_start is not None:
                on_start(sum(sources.values()))
            await target.begin()
            copied: dict[str, int] = {}
            for table in order:
                copied[table] = 0
                if table in MADE_BY_SCHEMA:
                    await target.clear(table)
                async for rows in source.rows(table, tables[table], batch_rows):
                    await target.insert(table, tables[table], rows)
                    copied[table] += len(rows)
                    if progress is not None:
                        progress(table, len(rows))
            await target.continue_sequences(await source.sequence_floors())
            counts = [
                TableCount(table, sources[table], copied[table], await target.count(table))
                for table in order
            ]
            wrong = [c for c in counts if not c.source == c.copied == c.target]
            if wrong:
                raise CopyError(
                    "the counts do not match, nothing was committed: "
                    + ", ".join(
                        f"{c.table} (source {c.source}, copied {c.copied}, target {c.target})"
                        for c in wrong
                    )
                )
            await target.commit()
        finally:
            await target.close()
    finally:
        await source.close()
    return counts


def _same(source_url: str, target_url: str) -> bool:
    if backend_of(source_url) == backend_of(target_url) == "sqlite":
        source, target = sqlite_path(source_url), sqlite_path(target_url)
        return source.resolve() == target.resolve()
    return source_url == target_url


async def _open_source(url: str) -> Source:
    if backend_of(url) == "postgresql":
        return await postgres.PostgresSource.open(url)
    return sqlite.SQLiteSource(sqlite_path(url))


async def _open_target(url: str) -> Target:
    if backend_of(url) == "postgresql":
        return await postgres.PostgresTarget.open(url)
    return sqlite.SQLiteTarget(sqlite_path(url))


def _refuse_unless_empty(url: str, revision: str) -> None:
    """Refuse a target holding any row (but those a fresh schema makes), or a schema newer
    than the source's."""
    if backend_of(url) == "postgresql":
        held = asyncio.run(postgres.rows_held(url))
    else:
        held = sqlite.rows_held(sqlite_path(url))
    full = {table: count for table, count in held.items() if count and table not in MADE_BY_SCHEMA}
    if full:
        listed = ", ".join(f"{table} {count:,}" for table, count in sorted(full.items()))
        raise CopyError(
            f"the target {redacted(url)} already holds data ({listed}); "
            "copy into an empty database, nothing was changed"
        )
    at = current_revision(url)
    if at is not None and at > revision:
        raise CopyError(
            f"the target's schema is at revision {at}, newer than the source's {revision}: "
            "run plantstore db upgrade on the source first, or copy into a new database"
        )
