"""Whose write-ahead log lies beside the database: SQLite finds a WAL by its name alone.

A database file replaced under a running server (``mv backup.db plantstore.db``) leaves the
old file's WAL at ``plantstore.db-wal``, full of pages of a file that is no longer there;
the next open of the new file would apply them to it and corrupt it. So the writers record,
in ``<database>-locks``, the file (device and inode) their WAL is written for, and:

- a running writer that finds the file replaced sets the WAL it writes (and the ``-shm``
  index of it) aside under a name of their own, where they keep the replaced database's last
  writes for whoever kept that file;
- a start that finds a WAL written for another file refuses, naming it, rather than open
  the new file beside it (a writer killed before it could set it aside).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from ..failures import StoreOpenError
from .locks_file import recorded_owner

log = logging.getLogger("plantstore.db")


def set_aside(database: Path, ours: tuple[int, int] | None) -> bool:
    """Rename ``<database>-wal`` and ``-shm`` out of the way if the WAL there is ``ours``
    (device and inode of the WAL this process writes) and another file is at the path;
    whether it did."""
    wal = Path(f"{database}-wal")
    try:
        found = os.stat(wal)
        os.stat(database)  # a file is there (not removed): the WAL would be applied to it
    except FileNotFoundError:
        return False
    if ours is None or (found.st_dev, found.st_ino) != ours:
        return False  # not a WAL this process wrote: not ours to move
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for suffix in ("-wal", "-shm"):
        try:
            os.rename(f"{database}{suffix}", f"{database}.replaced-{stamp}{suffix}")
        except FileNotFoundError:
            continue
    log.error(
        "the write-ahead log of the replaced database is kept as %s.replaced-%s-wal, so that "
        "it is not applied to the file now at %s",
        database,
        stamp,
        database,
    )
    return True


def refuse_a_foreign_wal(database: Path) -> None:
    """Raise ``StoreOpenError`` if the WAL beside ``database`` was written for another file."""
    owner = recorded_owner(database)
    if owner is None:
        return
    wal = Path(f"{database}-wal")
    try:
        if wal.stat().st_size == 0:
            return
        found = database.stat()
    except FileNotFoundError:
        return
    if (found.st_dev, found.st_ino) != owner:
        raise StoreOpenError(
            f"the write-ahead log {wal.name} beside {database} was written for another file: "
            "the database was replaced while a server was writing it. SQLite would apply that "
            f"log to this file and corrupt it: move {wal.name} and {database.name}-shm aside "
            "(they hold the replaced database's last writes), or restore with "
            "plantstore db restore"
        )
