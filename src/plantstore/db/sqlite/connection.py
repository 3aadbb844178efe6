"""Opening a SQLite connection the way every part of the service needs it: WAL, full fsync on
commit, foreign keys, and a busy timeout."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path


def connect(path: Path, busy_timeout_ms: int) -> sqlite3.Connection:
    """Open a connection in autocommit mode with WAL and full fsync on commit."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    _use_wal(conn, busy_timeout_ms)
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _use_wal(conn: sqlite3.Connection, busy_timeout_ms: int) -> None:
    """Put the file in WAL mode, trying again while another connection holds it, up to the
    busy timeout.

    Turning a rollback-journal file (a database just created or migrated) into WAL takes an
    exclusive lock, and SQLite answers a lock held elsewhere with "database is locked" at once,
    without its busy handler: the workers of ``serve``, or a CLI command beside them, opening
    a new database together would fail to start.
    """
    deadline = time.monotonic() + busy_timeout_ms / 1000
    pause = 0.001
    while True:
        try:
            if conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal":
                return
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise
            if time.monotonic() >= deadline:
                raise
        else:
            if time.monotonic() >= deadline:
                raise sqlite3.OperationalError("could not put the database in WAL mode")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
