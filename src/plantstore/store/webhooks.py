"""The webhook store that goes with an opened plant store (same database, same writer)."""

from __future__ import annotations

from .base import Store
from .postgres import PostgresStore
from .sqlite import SQLiteStore
from .webhooks_base import WebhookStore
from .webhooks_postgres import PostgresWebhookStore
from .webhooks_sqlite import SQLiteWebhookStore


def webhook_store_for(store: Store, busy_timeout_ms: int) -> WebhookStore:
    """Share the plant store's SQLite writer (one writer per process and file) or its
    PostgreSQL pool (whose failures it turns into 503s)."""
    if isinstance(store, SQLiteStore):
        return SQLiteWebhookStore(store.path, store.writer, busy_timeout_ms)
    if isinstance(store, PostgresStore):
        return PostgresWebhookStore(store._connection)
    raise TypeError(f"no webhook store for {type(store).__name__}")
