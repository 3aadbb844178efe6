"""The database engines every feature stores its data in, and nothing about any feature.

``open_database`` returns the (not yet opened) database a URL names: a ``SQLiteDatabase``
(reader connection, group-commit writer) or a ``PostgresDatabase`` (a pool). Each feature's
``backends.py`` picks its SQLite or PostgreSQL store for it. The schema of every feature is one
Alembic history (``migrations/``), applied by ``migrate.upgrade``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .failures import StoreOpenError, describe_failure
from .postgres.pool import PostgresDatabase
from .postgres.pooling import Pooling
from .sqlite.database import SQLiteDatabase
from .urls import backend_of, sqlite_path

Database = SQLiteDatabase | PostgresDatabase

__all__ = [
    "Database",
    "DatabaseSettings",
    "PostgresDatabase",
    "SQLiteDatabase",
    "StoreOpenError",
    "describe_failure",
    "open_database",
]


class DatabaseSettings(Protocol):
    """The settings a database is opened with (``plantstore.settings.Settings`` has them)."""

    @property
    def database_url(self) -> str: ...
    @property
    def pool_size(self) -> int: ...
    @property
    def connect_timeout(self) -> float: ...
    @property
    def statement_timeout(self) -> float: ...
    @property
    def allow_unsafe_durability(self) -> bool: ...
    @property
    def postgres_pooling(self) -> Pooling: ...
    @property
    def postgres_pooler_keeps_prepared(self) -> bool: ...
    @property
    def group_commit(self) -> bool: ...
    @property
    def max_batch(self) -> int: ...
    @property
    def busy_timeout_ms(self) -> int: ...
    @property
    def write_timeout(self) -> float: ...
    @property
    def sqlite_writers(self) -> str: ...


def open_database(
    settings: DatabaseSettings,
    on_commit: Callable[[int], None] | None = None,
    on_lock_wait: Callable[[float, bool], None] | None = None,
    on_refusal: Callable[[str], None] | None = None,
) -> Database:
    """Return the (not yet opened) database that ``settings.database_url`` names.

    ``on_commit`` hears how many writes each SQLite group commit carried, ``on_lock_wait``
    how long each waited for another process's write lock and whether it gave up,
    ``on_refusal`` the kind of each fault of the environment that refused a request (a 503).
    """
    if backend_of(settings.database_url) == "postgresql":
        return PostgresDatabase(
            settings.database_url,
            pool_size=settings.pool_size,
            connect_timeout=settings.connect_timeout,
            statement_timeout=settings.statement_timeout,
            allow_unsafe_durability=settings.allow_unsafe_durability,
            pooling=settings.postgres_pooling,
            pooler_keeps_prepared=settings.postgres_pooler_keeps_prepared,
            on_refusal=on_refusal,
        )
    return SQLiteDatabase(
        sqlite_path(settings.database_url),
        group_commit=settings.group_commit,
        max_batch=settings.max_batch,
        busy_timeout_ms=settings.busy_timeout_ms,
        write_timeout=settings.write_timeout,
        each_process_writes=settings.sqlite_writers == "each",
        on_commit=on_commit,
        on_lock_wait=on_lock_wait,
        on_refusal=on_refusal,
    )
