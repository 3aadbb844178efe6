"""Storage backends behind one protocol."""

from __future__ import annotations

from ..settings import Settings, sqlite_path
from .base import CreateOutcome, PlantRecord, Store, TokenRecord
from .sqlite import SQLiteStore

__all__ = ["CreateOutcome", "PlantRecord", "SQLiteStore", "Store", "TokenRecord", "open_store"]


def open_store(settings: Settings) -> Store:
    """Return the (not yet opened) store that ``settings.database_url`` names."""
    return SQLiteStore(
        sqlite_path(settings.database_url),
        group_commit=settings.group_commit,
        max_batch=settings.max_batch,
        busy_timeout_ms=settings.busy_timeout_ms,
    )
