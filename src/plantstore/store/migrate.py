"""Bring a database's schema to the newest revision with Alembic.

Every command and every server process calls this before it touches the store, so a fresh
database works for any of them. Two processes never migrate at once: a file lock guards a
SQLite file, and ``migrations/env.py`` takes a PostgreSQL advisory lock.
"""

from __future__ import annotations

import fcntl
from pathlib import Path

import asyncpg
from alembic import command
from alembic.config import Config
from sqlalchemy.exc import DBAPIError

from ..database_url import backend_of, sqlite_path
from .base import StoreOpenError, describe_failure

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(database_url: str) -> Config:
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
        _upgrade(database_url, revision)
    except (
        OSError,
        TimeoutError,
        DBAPIError,
        asyncpg.PostgresError,
        asyncpg.InterfaceError,
    ) as exc:
        raise StoreOpenError(f"cannot open the database: {describe_failure(exc)}") from exc


def _upgrade(database_url: str, revision: str) -> None:
    if backend_of(database_url) == "postgresql":
        command.upgrade(alembic_config(database_url), revision)
        return
    path = sqlite_path(database_url)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.migrate-lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        command.upgrade(alembic_config(database_url), revision)
