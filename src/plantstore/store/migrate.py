"""Bring a database's schema to the newest revision with Alembic.

Every command calls this before it touches the store, so a fresh path works for any of
them; a file lock keeps two processes from migrating one SQLite file at once.
"""

from __future__ import annotations

import fcntl
from pathlib import Path

from alembic import command
from alembic.config import Config

from ..settings import sqlite_path

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", database_url)
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Create or upgrade the schema at ``database_url`` to ``revision``."""
    path = sqlite_path(database_url)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.migrate-lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        command.upgrade(alembic_config(database_url), revision)
