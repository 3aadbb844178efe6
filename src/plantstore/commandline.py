"""What every ``plantstore`` command shares, whichever feature offers it: its settings (from
the root command's ``--database`` and the environment, the database migrated), the database
opened for one piece of work, and tables and dates as the commands print them.

A bad setting, an unreachable database or trouble with the files under it (permission
denied, a read-only file system, no such directory, a full disk) stops the command with one
line (``Error: ...``) naming the trouble, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import sqlite3
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import click

from .db import Database, StoreOpenError, open_database
from .db.migrate import upgrade
from .db.urls import backend_of, sqlite_path
from .errors import PlantstoreError
from .formats import rfc3339
from .settings import Settings, SettingsError, load_settings

T = TypeVar("T")
CANNOT_OPEN = "cannot open the database"


def settings_for(
    ctx: click.Context,
    before_migrating: Callable[[Settings], object] | None = None,
    **overrides: object,
) -> Settings:
    """The settings of this command, with its database migrated to the newest schema (so any
    command works on a fresh path); ``before_migrating`` may refuse them first."""
    database_url: str | None = ctx.find_root().obj["database_url"]
    try:
        settings = load_settings(database_url=database_url, **overrides)
        database_url = settings.database_url
        if before_migrating is not None:
            before_migrating(settings)
        upgrade(database_url)
    except SettingsError as exc:
        raise click.ClickException(_flag_named(str(exc), overrides)) from None
    except (StoreOpenError, OSError, sqlite3.Error) as exc:
        raise click.ClickException(failure_line(exc, database_url)) from None
    return settings


def _flag_named(problem: str, overrides: dict[str, object]) -> str:
    """A bad value given as a flag (``--workers 0``) named as that flag, not its variable."""
    for name, value in overrides.items():
        variable = f"invalid setting PLANTSTORE_{name.upper()}:"
        if value is not None and problem.startswith(variable):
            flag = f"--{name.replace('_', '-')}"
            return f"invalid {flag} {value}:{problem.removeprefix(variable)}"
    return problem


def with_database(settings: Settings, work: Callable[[Database], Awaitable[T]]) -> T:
    """Open the database, run ``work`` on it, close it; a database failure is one line.

    Whatever fails while the database opens is the trouble of the files under it (its
    ``-locks`` file, say); the same errors later, in ``work``, are left to the root
    command, which tells the environment's from a fault of ours.
    """

    async def run() -> T:
        database = open_database(settings)
        try:
            await database.open()
        except (OSError, sqlite3.Error) as exc:
            with contextlib.suppress(Exception):
                await database.close()  # what the failed open did open (a reader connection)
            raise StoreOpenError(f"{CANNOT_OPEN}: {exc}") from exc
        try:
            return await work(database)
        finally:
            await database.close()

    try:
        return asyncio.run(run())
    except (StoreOpenError, PlantstoreError) as exc:  # PlantstoreError: the database went away
        raise click.ClickException(failure_line(exc, settings.database_url)) from None


def failure_line(exc: BaseException, database_url: str | None = None) -> str:
    """One line for a command the database stopped: the trouble of the files under it named,
    if that is what stopped it, else the message its own layer gave it."""
    if isinstance(exc, (StoreOpenError, OSError, sqlite3.Error)):
        trouble = file_trouble(exc, _database_path(database_url))
        if trouble is not None:
            return f"{CANNOT_OPEN}: {trouble}"
        if not isinstance(exc, StoreOpenError):
            return f"{CANNOT_OPEN}: {exc}"
    return str(exc)  # worded where it was raised (a setting, an unreachable server, ...)


_BY_ERRNO = {
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",  # e.g. an immutable file or directory
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EIO: "I/O error",
    errno.ENOTDIR: "not a directory",
    errno.EISDIR: "is a directory",
    errno.ELOOP: "too many symbolic links",
    errno.ENAMETOOLONG: "file name too long",
}
_BY_SQLITE_CODE = {  # primary result codes; the ones that do not say why are looked into
    sqlite3.SQLITE_FULL: "disk full",
    sqlite3.SQLITE_PERM: "permission denied",
    sqlite3.SQLITE_READONLY: "read-only database",
    sqlite3.SQLITE_CANTOPEN: "a database file cannot be opened",
    sqlite3.SQLITE_IOERR: "disk I/O error",
    sqlite3.SQLITE_NOTADB: "not a SQLite database",
    sqlite3.SQLITE_CORRUPT: "the database file is damaged",
}
_VAGUE_SQLITE_CODES = {sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR}
# Less free space than this is a full disk to SQLite, which then fails with "disk I/O error"
# (its shared-memory file alone takes 32 KiB).
NEARLY_FULL_BYTES = 1 << 20


def file_trouble(exc: BaseException, database: Path | None = None) -> str | None:
    """The file-system trouble behind ``exc`` (it, or what it was raised from), with the path
    it concerns, e.g. ``read-only file system (/srv/plantstore.db-locks)``; None if none is.

    An ``OSError`` says why by its errno. SQLite often does not ("unable to open database
    file", "disk I/O error"), so then the ``database`` path and its directory are looked at.
    """
    for cause in _chain(exc):
        if isinstance(cause, OSError) and cause.errno is not None:
            trouble = _errno_trouble(cause, database)
        elif isinstance(cause, sqlite3.Error):
            trouble = _sqlite_trouble(cause, database)
        else:
            continue
        if trouble is not None:
            return trouble
    return None


def _errno_trouble(exc: OSError, database: Path | None) -> str | None:
    if exc.errno == errno.ENOENT and exc.filename is not None:
        path = Path(os.fsdecode(exc.filename))
        if not path.parent.is_dir():
            return f"no such directory ({path.parent})"
        if database is not None and path in database.parents:  # it could not be made
            return f"no such directory ({path})"
        return f"no such file or directory ({path})"
    kind = _BY_ERRNO.get(exc.errno or 0)
    # Of a copy's two files (shutil), a full disk is the target's
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT) and exc.filename2 is not None
    filename = exc.filename2 if full else exc.filename
    if kind is None or filename is None:
        return kind
    return f"{kind} ({_shown(filename)})"


def _sqlite_trouble(exc: sqlite3.Error, database: Path | None) -> str | None:
    code = getattr(exc, "sqlite_errorcode", -1) & 0xFF  # the primary code of the extended one
    kind = _BY_SQLITE_CODE.get(code)
    if kind is None or database is None:
        return kind
    found = _look_into(database) if code in _VAGUE_SQLITE_CODES else None
    return found or f"{kind} ({database})"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from or during (SQLAlchemy's ``orig`` too), once each."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for linked in (getattr(current, "orig", None), current.__cause__, current.__context__):
            if isinstance(linked, BaseException):
                pending.append(linked)


def _look_into(database: Path) -> str | None:
    """What stops SQLite at ``database``: its directory missing, read-only, not writable,
    one of its files not readable and writable, or no space left; None if nothing does."""
    directory = database.parent
    try:
        if not directory.is_dir():
            return f"no such directory ({directory})"
        space = os.statvfs(directory)
        if space.f_flag & os.ST_RDONLY:
            return f"read-only file system ({directory})"
        if not os.access(directory, os.W_OK | os.X_OK):
            return f"permission denied ({directory})"
        for suffix in ("", "-wal", "-shm", "-journal"):
            file = database.with_name(database.name + suffix)
            if file.exists() and not os.access(file, os.R_OK | os.W_OK):
                return f"permission denied ({file})"
        root = os.geteuid() == 0  # who may use the blocks and inodes kept in reserve
        free = (space.f_bfree if root else space.f_bavail) * space.f_frsize
        inodes = space.f_ffree if root else space.f_favail
        if free < NEARLY_FULL_BYTES or (space.f_files > 0 and inodes == 0):  # btrfs: 0 files
            return f"disk full ({directory})"
    except OSError:
        return None
    return None


def _shown(filename: str | bytes) -> str:
    """A path as the operator knows it, and where it leads if it is a symbolic link."""
    path = os.fsdecode(filename)
    if os.path.islink(path):
        return f"{path} -> {os.path.realpath(path)}"
    return path


def _database_path(database_url: str | None) -> Path | None:
    try:
        if database_url is not None and backend_of(database_url) == "sqlite":
            return sqlite_path(database_url)
    except ValueError:
        return None
    return None


def when(timestamp: float | None, missing: str | None = None) -> str | None:
    """A stored moment as the commands print it (RFC 3339), or ``missing`` if there is none."""
    return missing if timestamp is None else rfc3339(timestamp)


def echo_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print ``rows`` under ``header`` in columns as wide as their widest cell."""
    table = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(row[column]) for row in table) for column in range(len(header))]
    for row in table:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
