"""Bring a database's schema to the newest revision with Alembic.

Every command and every server process calls this before it touches the store, so a fresh
database works for any of them. Two processes never migrate at once: a lock in the file
beside a SQLite database (``<database>-locks``) guards it, and ``migrations/env.py`` takes a
PostgreSQL advisory lock.

A database already at ``SCHEMA_HEAD`` (every start but the first) is checked with one query,
without importing Alembic and SQLAlchemy: loaded, they stayed in every server worker's memory
for nothing (megabytes of each worker's RSS). ``tests/db/test_migrations.py`` holds
``SCHEMA_HEAD`` to Alembic's own head.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg

from .failures import StoreOpenError, describe_failure
from .sqlite import locks_file, ofd_lock
from .sqlite.wal_owner import refuse_a_foreign_wal
from .urls import backend_of, sqlite_path

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
SCHEMA_HEAD = "0012"  # the newest revision in migrations/versions/


def alembic_config(database_url: str) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    # The URL goes in attributes, not the ini options, where '%' would be interpolated.
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Create or upgrade the schema at ``database_url`` to ``revision``.

    Raise ``StoreOpenError`` with one line if the database cannot be reached or opened.
    """
    try:
        if revision == "head" and current_revision(database_url) == SCHEMA_HEAD:
            return  # the common case
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise StoreOpenError(f"cannot open the database: {describe_failure(exc)}") from exc
    from alembic.util import CommandError
    from sqlalchemy.exc import DBAPIError

    try:
        _upgrade(database_url, revision)
    except CommandError as exc:  # e.g. a revision this release does not know: a newer schema
        raise StoreOpenError(
            f"cannot migrate the database: {describe_failure(exc)} "
            "(was it upgraded by a newer plantstore?)"
        ) from exc
    except (
        OSError,
        TimeoutError,
        DBAPIError,
        asyncpg.PostgresError,
        asyncpg.InterfaceError,
    ) as exc:
        raise StoreOpenError(f"cannot open the database: {describe_failure(exc)}") from exc


@functools.cache
def head_revision() -> str | None:
    """Alembic's own head, read from the migration scripts."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def current_revision(database_url: str) -> str | None:
    """The revision the database is at; None if it has none yet."""
    if backend_of(database_url) == "postgresql":
        return asyncio.run(_postgres_revision(database_url))
    path = sqlite_path(database_url)
    if not path.exists():
        _refuse_a_removed_database(path)
        return None
    refuse_a_foreign_wal(path)
    with contextlib.closing(sqlite3.connect(path)) as connection:
        try:
            row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
        except sqlite3.OperationalError:  # no such table: never migrated
            return None
    return None if row is None else str(row[0])


def _refuse_a_removed_database(path: Path) -> None:
    """What a plantstore server that wrote a database leaves beside it (``-locks`` with the
    WAL's owner recorded, a ``-wal``) with no database there: it was removed, perhaps under a
    running server, and a new, empty one would start in its place (with a new first token)
    as if nothing had been there. Refuse, and say how to go on. (A ``-locks`` file alone is
    no sign: a migration makes it before the database.)"""
    found = []
    if locks_file.recorded_owner(path) is not None:
        found.append(locks_file.path_of(path).name)
    # ``-flush``: where releases before the ``-locks`` file kept that record
    found += [
        f"{path.name}{suffix}" for suffix in ("-flush", "-wal") if Path(f"{path}{suffix}").exists()
    ]
    if found:
        raise StoreOpenError(
            f"no database at {path}, but files of one are there ({', '.join(found)}): "
            "the database was removed. Put it back or restore a backup (plantstore db restore); "
            f"to start afresh on purpose, remove the {path.name}-* files first"
        )


async def _postgres_revision(database_url: str) -> str | None:
    # No statement cache: behind a pooler in transaction mode a named statement would outlive
    # its transaction on a server connection that another client is lent next.
    connection = await asyncpg.connect(database_url, timeout=10, statement_cache_size=0)
    try:
        version: str | None = await connection.fetchval("SELECT version_num FROM alembic_version")
        return version
    except asyncpg.UndefinedTableError:
        return None
    finally:
        await connection.close()


def _upgrade(database_url: str, revision: str) -> None:
    from alembic import command

    if backend_of(database_url) == "postgresql":
        command.upgrade(alembic_config(database_url), revision)
        return
    path = sqlite_path(database_url)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = locks_file.open_shared(path)
    try:
        ofd_lock.lock(lock, locks_file.MIGRATE)
        command.upgrade(alembic_config(database_url), revision)
    finally:
        os.close(lock)
