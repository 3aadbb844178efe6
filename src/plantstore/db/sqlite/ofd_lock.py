"""Byte-range locks that belong to an open file, not to a process: Linux's open file
description (OFD) locks, so that one small file holds every lock the writers of a database
share, each on a byte of its own.

``flock`` locks a whole file: each lock needed a file of its own beside the database. POSIX
record locks (``lockf``, ``F_SETLK``) lock byte ranges but belong to the process: any close
of the file in the process drops them all, and two opens in one process never contend. OFD
locks (``F_OFD_SETLK``, Linux 3.15) lock byte ranges and otherwise behave like ``flock``: they
belong to the open file description (two ``open`` calls contend, even in one process), go when
its last descriptor closes or the process dies, however it dies, and never meet SQLite's own
POSIX locks, which are on the database and its ``-shm``, not on our file.
"""

from __future__ import annotations

import errno
import fcntl
import struct

# struct flock on 64-bit Linux: short l_type, short l_whence, off_t l_start, off_t l_len,
# pid_t l_pid (0 for OFD locks; -1 from F_OFD_GETLK), 32 bytes with the padding.
_FLOCK = struct.Struct("=hh4xqqi4x")
_REFUSED = (errno.EAGAIN, errno.EACCES)  # the two answers of F_SETLK to a conflicting lock


def _request(kind: int, at: int) -> bytes:
    return _FLOCK.pack(kind, 0, at, 1, 0)  # whence SEEK_SET, one byte


def lock(descriptor: int, at: int, *, shared: bool = False) -> None:
    """Wait for, then take, the lock on byte ``at`` (shared, or else exclusive)."""
    kind = fcntl.F_RDLCK if shared else fcntl.F_WRLCK
    fcntl.fcntl(descriptor, fcntl.F_OFD_SETLKW, _request(kind, at))


def try_lock(descriptor: int, at: int, *, shared: bool = False) -> bool:
    """Take the lock on byte ``at`` if no other open file holds a conflicting one; whether
    it did."""
    kind = fcntl.F_RDLCK if shared else fcntl.F_WRLCK
    try:
        fcntl.fcntl(descriptor, fcntl.F_OFD_SETLK, _request(kind, at))
    except OSError as exc:
        if exc.errno in _REFUSED:
            return False
        raise
    return True


def unlock(descriptor: int, at: int) -> None:
    fcntl.fcntl(descriptor, fcntl.F_OFD_SETLK, _request(fcntl.F_UNLCK, at))


def held_elsewhere(descriptor: int, at: int, *, alone: bool = False) -> bool:
    """Whether another open file holds a lock on byte ``at``: any lock (one that an exclusive
    lock would wait for), or with ``alone`` an exclusive one. Takes nothing; the file may be
    open read-only."""
    kind = fcntl.F_RDLCK if alone else fcntl.F_WRLCK
    answer = fcntl.fcntl(descriptor, fcntl.F_OFD_GETLK, _request(kind, at))
    found: int = _FLOCK.unpack(answer)[0]
    return found != fcntl.F_UNLCK
