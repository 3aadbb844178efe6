"""Which webhook store serves a database: the SQLite one or the PostgreSQL one."""

from __future__ import annotations

from ..db import Database, SQLiteDatabase
from .postgres import PostgresWebhookStore
from .sqlite import SQLiteWebhookStore
from .store import WebhookStore


def webhook_store_for(database: Database) -> WebhookStore:
    """Share the database's SQLite writer (one writer per process and file) or its
    PostgreSQL pool (whose failures it turns into 503s)."""
    if isinstance(database, SQLiteDatabase):
        return SQLiteWebhookStore(database.path, database.writer, database.busy_timeout_ms)
    return PostgresWebhookStore(database.connection)
