"""A store on the machine's one writer (``PLANTSTORE_SQLITE_WRITERS=one``), the setting the
tests of the relay are about; the default gives each store a writer of its own."""

from __future__ import annotations

from pathlib import Path

from plantstore.db.sqlite.database import SQLiteDatabase


def machine_writer(db: Path) -> SQLiteDatabase:
    """A store of ``db`` that owns the machine's writer or sends its writes to the owner."""
    return SQLiteDatabase(db, each_process_writes=False)
