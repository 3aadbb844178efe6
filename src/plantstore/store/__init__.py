"""Storage backends behind one protocol."""

from __future__ import annotations

from collections.abc import Callable

from ..database_url import sqlite_path
from ..settings import Settings
from .base import CreateOutcome, PlantRecord, Store, StoreOpenError, TokenRecord
from .postgres import PostgresStore
from .sqlite import SQLiteStore

__all__ = [
    "CreateOutcome",
    "PlantRecord",
    "PostgresStore",
    "SQLiteStore",
    "Store",
    "StoreOpenError",
    "TokenRecord",
    "open_store",
]


def open_store(
    settings: Settings,
    on_commit: Callable[[int], None] | None = None,
    on_lock_wait: Callable[[float, bool], None] | None = None,
) -> Store:
    """Return the (not yet opened) store that ``settings.database_url`` names.

    ``on_commit`` hears how many writes each SQLite group commit carried, ``on_lock_wait``
    how long each waited for another process's write lock and whether it gave up.
    """
    if settings.backend == "postgresql":
        return PostgresStore(
            settings.database_url,
            pool_size=settings.pool_size,
            connect_timeout=settings.connect_timeout,
            statement_timeout=settings.statement_timeout,
            allow_unsafe_durability=settings.allow_unsafe_durability,
            max_plants_per_user=settings.max_plants_per_user,
        )
    return SQLiteStore(
        sqlite_path(settings.database_url),
        group_commit=settings.group_commit,
        max_batch=settings.max_batch,
        busy_timeout_ms=settings.busy_timeout_ms,
        max_plants_per_user=settings.max_plants_per_user,
        on_commit=on_commit,
        on_lock_wait=on_lock_wait,
    )
