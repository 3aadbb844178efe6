"""Putting a backup in place of a SQLite database, safely: never under a running server, and
never beside a ``-wal`` of the old file.

A file copied over the database of a running server is not seen by it: its connections keep
writing the old file (or, copied in place, write the old file's pages into the new one), and
a ``-wal`` left beside the restored file belongs to the old database: SQLite would apply it to
the backup at the next open and corrupt it. So ``restore``:

1. takes the machine's writer lock (``WRITER`` in ``<database>-locks``, held by the server
   process that writes the file): refused while one holds it, and no server starts writing
   meanwhile;
2. checks the backup (``integrity_check``, a plantstore schema);
3. checkpoints the old database's WAL into it and keeps the old file beside, renamed;
4. copies the backup in under a temporary name, syncs it, renames it into place, and
   removes any ``-wal``, ``-shm`` or ``-journal`` left at the path.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import locks_file, ofd_lock
from .backup import BackupError, check_copy, sync

_SIDE_FILES = ("-wal", "-shm", "-journal")


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """What the restore did, for the operator."""

    database: Path
    kept: Path | None  # the database as it was before, renamed; None if there was none
    users: int
    plants: int


def restore(backup: Path, database: Path) -> RestoreReport:
    """Put ``backup`` in place of ``database``; raise ``BackupError`` with one line if not."""
    if not backup.is_file():
        raise BackupError(f"no backup file at {backup}")
    if not database.parent.is_dir():
        raise BackupError(f"no directory {database.parent} for the database")
    users, plants = _checked(backup)
    with _writer_lock(database):
        kept = _set_aside(database)
        partial = database.with_name(f".{database.name}.restore-{os.getpid()}")
        try:
            shutil.copyfile(backup, partial)
            sync(partial)
            os.replace(partial, database)
        finally:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
        for suffix in _SIDE_FILES:
            with contextlib.suppress(FileNotFoundError):
                Path(f"{database}{suffix}").unlink()
        sync(database.parent)
    return RestoreReport(database, kept, users, plants)


def _checked(backup: Path) -> tuple[int, int]:
    try:
        uri = f"{backup.resolve().as_uri()}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'plants'").fetchone() is None:
                raise BackupError(f"{backup} is not a plantstore database (no plants table)")
        return check_copy(uri)
    except sqlite3.Error as exc:
        raise BackupError(f"{backup} is not a usable SQLite database: {exc}") from None


@contextlib.contextmanager
def _writer_lock(database: Path) -> Iterator[None]:
    """Hold the lock every server writing ``database`` holds; refuse if one holds it now."""
    descriptor = locks_file.open_shared(database)
    try:
        if not ofd_lock.try_lock(descriptor, locks_file.WRITER):
            raise BackupError(
                f"a plantstore server (or command) is using {database}: stop it first, then restore"
            )
        yield
    finally:
        os.close(descriptor)


def _set_aside(database: Path) -> Path | None:
    """Fold the old database's WAL into it and rename it out of the way; its name, or None."""
    if not database.exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(database, isolation_level=None)) as conn:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    except sqlite3.Error as exc:
        raise BackupError(f"cannot fold the WAL of {database} into it: {exc}") from None
    if busy:
        raise BackupError(f"{database} is in use by another process: stop it first")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    kept = database.with_name(f"{database.name}.before-restore-{stamp}")
    # Never over an older one: a second restore within the second (of that very file, say,
    # to undo the first) would otherwise replace the database it is restoring.
    again = 1
    while kept.exists():
        again += 1
        kept = database.with_name(f"{database.name}.before-restore-{stamp}-{again}")
    os.replace(database, kept)
    return kept
