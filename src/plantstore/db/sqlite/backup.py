"""A consistent copy of a SQLite database that may be serving, taken with ``VACUUM INTO``.

``VACUUM INTO`` reads the database inside one read transaction, so the copy is the database
as of one commit: every write acknowledged before the backup began, none half-applied. In
WAL mode a reader never blocks the writers, so a server keeps accepting writes meanwhile
(they go to the WAL, which grows until the read ends). It was chosen over the online backup
API (``sqlite3.Connection.backup``) because its copy is a single compact file in rollback-
journal mode, with no free pages and no ``-wal`` beside it, ready to be copied anywhere;
and it never overwrites a file that has content. Run in one step, the backup API would give
the same snapshot, page for page, free pages included.

The copy is written under a temporary name, synced, checked with ``PRAGMA integrity_check``
and only then renamed to the name asked for: a file at that name is always a whole, checked
backup, even if the command is killed halfway.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path


class BackupError(Exception):
    """The backup could not be taken; the message says why in one line."""


@dataclass(frozen=True, slots=True)
class BackupReport:
    """What a finished backup holds, for the operator to check at a glance."""

    path: Path
    size_bytes: int
    users: int
    plants: int
    seconds: float


def back_up(source: Path, target: Path, busy_timeout_ms: int = 5_000) -> BackupReport:
    """Copy the SQLite database at ``source`` to the new file ``target``, checked."""
    _check_paths(source, target)
    started = time.monotonic()
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        _vacuum_into(source, partial, busy_timeout_ms)
        users, plants = _check_copy(partial)
        sync(partial)
        os.replace(partial, target)
        sync(target.parent)
    finally:
        for leftover in (partial, *_companions(partial)):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    return BackupReport(target, target.stat().st_size, users, plants, time.monotonic() - started)


def _check_paths(source: Path, target: Path) -> None:
    if not source.is_file():
        raise BackupError(f"no SQLite database at {source}")
    if target.exists():
        raise BackupError(f"{target} already exists; a backup never overwrites a file")
    if not target.parent.is_dir():
        raise BackupError(f"no directory {target.parent} to write the backup in")


def _vacuum_into(source: Path, partial: Path, busy_timeout_ms: int) -> None:
    try:
        with contextlib.closing(sqlite3.connect(source, isolation_level=None)) as conn:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'plants'").fetchone() is None:
                raise BackupError(f"{source} is not a plantstore database (no plants table)")
            conn.execute("VACUUM INTO ?", (str(partial),))
    except sqlite3.Error as exc:
        raise BackupError(f"cannot back up {source}: {exc}") from None


def _check_copy(partial: Path) -> tuple[int, int]:
    """Make the copy one self-contained file; its (users, plants) once checked."""
    with contextlib.closing(sqlite3.connect(partial, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")
    return check_copy(str(partial))


def check_copy(database: str) -> tuple[int, int]:
    """Return a copy's (users, plants) once ``integrity_check`` passes; raise otherwise.
    ``database`` is a path, or a ``file:`` URI (read-only, say)."""
    with contextlib.closing(sqlite3.connect(database, uri=True, isolation_level=None)) as conn:
        problems = [row[0] for row in conn.execute("PRAGMA integrity_check")]
        if problems != ["ok"]:
            raise BackupError(f"the copy failed its integrity check: {problems[0]}")
        [users] = conn.execute("SELECT count(*) FROM users").fetchone()
        [plants] = conn.execute("SELECT count(*) FROM plants").fetchone()
    return int(users), int(plants)


def sync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _companions(path: Path) -> list[Path]:
    return [path.with_name(f"{path.name}{suffix}") for suffix in ("-wal", "-shm", "-journal")]
