"""Faults of the environment under a SQLite file, told as 503s that name the trouble.

SQLite names them itself (``SQLITE_FULL``, ``SQLITE_IOERR_*``, ``SQLITE_READONLY_*``,
``SQLITE_CANTOPEN``, ``SQLITE_NOTADB``); the service's own file operations (the WAL's fsync,
the lock files) fail with an ``OSError`` whose ``errno`` says the same. Anything else is a
fault of ours and stays what it is (a 500, logged with its traceback).

``FileIdentity`` catches what SQLite cannot: the file at the configured path removed or
replaced under an open connection, which would go on writing into a file nobody will read
again (SQLite documents an unlinked database file as a way to lose data).
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
from pathlib import Path

from ...errors import StoreUnavailable

log = logging.getLogger("plantstore.db")

_SQLITE_READONLY_DBMOVED = sqlite3.SQLITE_READONLY | (4 << 8)

_FULL = ("the database's disk is full; retry later", "disk_full")
_IO = ("the database's disk failed (an I/O error); retry later", "io_error")
_READ_ONLY = ("the database's file system is read-only; retry later", "read_only")
_REPLACED = ("the database file was removed or replaced; retry later", "file_replaced")
_DAMAGED = ("the database file cannot be read; retry later", "file_damaged")
_CANNOT_OPEN = ("the database file cannot be opened; retry later", "cannot_open")
_BUSY = ("the database is busy; retry shortly", "busy")

_BY_SQLITE_CODE = {
    sqlite3.SQLITE_FULL: _FULL,
    sqlite3.SQLITE_IOERR: _IO,
    sqlite3.SQLITE_READONLY: _READ_ONLY,
    sqlite3.SQLITE_CANTOPEN: _CANNOT_OPEN,
    sqlite3.SQLITE_NOTADB: _DAMAGED,
    sqlite3.SQLITE_CORRUPT: _DAMAGED,
    sqlite3.SQLITE_PERM: _READ_ONLY,
    sqlite3.SQLITE_BUSY: _BUSY,
    sqlite3.SQLITE_LOCKED: _BUSY,
}
_BY_ERRNO = {
    errno.ENOSPC: _FULL,
    errno.EDQUOT: _FULL,
    errno.EIO: _IO,
    errno.EROFS: _READ_ONLY,
    errno.EACCES: _READ_ONLY,
    errno.EPERM: _READ_ONLY,
    errno.ENOENT: _REPLACED,
    errno.ESTALE: _REPLACED,
}


def environment_fault(exc: BaseException) -> StoreUnavailable | None:
    """The 503 for ``exc`` if it is a fault of the environment; None for anything else."""
    if isinstance(exc, StoreUnavailable):
        return exc
    told: tuple[str, str] | None = None
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if code == _SQLITE_READONLY_DBMOVED:
            told = _REPLACED
        elif code is not None:
            told = _BY_SQLITE_CODE.get(code & 0xFF)
        elif str(exc).startswith("cannot commit - no transaction is active"):
            told = _IO  # SQLite rolled the transaction back on a failed write (full, I/O)
    elif isinstance(exc, OSError) and exc.errno is not None:
        told = _BY_ERRNO.get(exc.errno)
    return None if told is None else StoreUnavailable(*told)


def file_replaced() -> StoreUnavailable:
    return StoreUnavailable(*_REPLACED)


class FileIdentity:
    """The database file this process opened (device and inode), to tell when the file at
    its path is another one, or none."""

    def __init__(self, path: Path) -> None:
        self._path = path
        found = os.stat(path)
        self.identity = (found.st_dev, found.st_ino)
        self._lost = False

    def check(self) -> StoreUnavailable | None:
        """None while the path still names the opened file; the 503 to answer otherwise."""
        try:
            found = os.stat(self._path)
        except FileNotFoundError:
            same = False
        except OSError as exc:
            return environment_fault(exc) or file_replaced()
        else:
            same = (found.st_dev, found.st_ino) == self.identity
        if same != (not self._lost):
            self._lost = not same
            self._tell(same)
        return None if same else file_replaced()

    def _tell(self, same: bool) -> None:
        if same:
            log.warning("the database file is back at %s; it is served again", self._path)
            return
        log.error(
            "the database file at %s was removed or replaced under the running service: "
            "writes and reads are refused (503), so that nothing is acknowledged into a file "
            "that is no longer the database. Put the file back, or restart the service to "
            "open the file now at that path (to restore a backup, stop the service and run "
            "`plantstore db restore`)",
            self._path,
        )
