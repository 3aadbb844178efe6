"""The one file beside a SQLite database, besides SQLite's ``-wal`` and ``-shm``, that every
process writing it shares: ``<database>-locks``, a few numbers and every lock they take.

The numbers, mapped into each writer's memory (``flush``) or written in place:

- at 0 and 8: fsyncs of the WAL begun and finished, unsigned 64-bit (``flush``);
- at 16: the device and inode of the database file the WAL is written for (``wal_owner``);
- at 32: the pid of the process that owns the machine's writer, for whoever asks which one
  (/proc/locks shows an OFD lock with pid -1): true while the writer's lock is held.

The locks are OFD locks on one byte each (``ofd_lock``), past the numbers (locks beyond the
end of a file are fine), where each used to need a file of its own:

- ``FLUSH``: one fsync of the WAL at a time (``flush``);
- ``WRITER``: held by the process that owns the machine's writer (``machine_writer``), or by
  a restore, which must not run beside one (``restore``);
- ``WAITERS``: shared, by each writer waiting for SQLite's write lock (``lock``);
- ``MIGRATE``: around Alembic's upgrade of the file (``migrate``).

It holds no data: with nothing running, removing it loses only the checks the WAL owner's
record allows (a replaced or removed database).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from .ofd_lock import held_elsewhere

SUFFIX = "-locks"
SIZE = 40  # the numbers' bytes

OWNER = struct.Struct("=QQ")
OWNER_AT = 16
PID = struct.Struct("=Q")
PID_AT = 32

FLUSH = 4096
WRITER = 4097
WAITERS = 4098
MIGRATE = 4099


def path_of(database: Path | str) -> Path:
    return Path(f"{database}{SUFFIX}")


def open_shared(database: Path | str) -> int:
    """A descriptor of its own (its locks contend with every other open), made if need be."""
    # 0o666 less the umask (the kernel applies it), as SQLite makes -wal and -shm: whoever may
    # write the database may take part in its locks.
    return os.open(path_of(database), os.O_RDWR | os.O_CREAT, 0o666)


def _read(database: Path, at: int, size: int) -> bytes:
    try:
        with open(path_of(database), "rb") as file:
            file.seek(at)
            return file.read(size)
    except (FileNotFoundError, IsADirectoryError):  # a directory there holds no numbers
        return b""


def recorded_owner(database: Path) -> tuple[int, int] | None:
    """The database file (device, inode) the WAL beside ``database`` was last written for,
    as its writers recorded it; None if none did."""
    data = _read(database, OWNER_AT, OWNER.size)
    if len(data) < OWNER.size:
        return None
    owner: tuple[int, int] = OWNER.unpack(data)
    return None if owner == (0, 0) else owner


def record_writer_pid(descriptor: int) -> None:
    """Note this process as the writer's owner (it holds ``WRITER``)."""
    os.pwrite(descriptor, PID.pack(os.getpid()), PID_AT)


def writer_pid(database: Path) -> int | None:
    """The process that owns the machine's writer of ``database``; None if none does (just
    after a takeover, until the new owner has written its pid, the one before it)."""
    try:
        descriptor = os.open(path_of(database), os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        if not held_elsewhere(descriptor, WRITER, alone=True):  # shared: each writes its own
            return None
        data = os.pread(descriptor, PID.size, PID_AT)
    finally:
        os.close(descriptor)
    pid: int = PID.unpack(data)[0] if len(data) == PID.size else 0
    return pid or None
