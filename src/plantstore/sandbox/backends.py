"""Which sandbox store serves a database: the SQLite one or the PostgreSQL one."""

from __future__ import annotations

from ..db import Database, SQLiteDatabase
from .postgres import PostgresSandbox
from .sqlite import SQLiteSandbox
from .store import SandboxStore


def sandbox_store_for(database: Database) -> SandboxStore:
    """The sandbox store on ``database`` (opened by its owner, who also closes it)."""
    if isinstance(database, SQLiteDatabase):
        return SQLiteSandbox(database)
    return PostgresSandbox(database)
