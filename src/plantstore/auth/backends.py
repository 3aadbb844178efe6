"""Which token and user store serves a database: the SQLite one or the PostgreSQL one."""

from __future__ import annotations

from ..db import Database, SQLiteDatabase
from .postgres import PostgresTokens
from .sqlite import SQLiteTokens
from .store import TokenStore


def token_store_for(database: Database) -> TokenStore:
    """The token and user store on ``database`` (opened by its owner, who also closes it)."""
    if isinstance(database, SQLiteDatabase):
        return SQLiteTokens(database)
    return PostgresTokens(database)
