"""One fsync of the WAL for the commits of every process writing a file: the machine's group
commit.

Writers commit with ``synchronous=NORMAL``: the commit writes its frames to the WAL and
releases SQLite's write lock without an fsync, so another worker's writer can commit meanwhile.
Before anyone is answered, ``WalFlush.after_commit`` makes those frames durable the way
PostgreSQL's backends flush their WAL: under an exclusive lock, one process at a time
calls ``fdatasync`` on the WAL, and a process whose commit an fsync *begun after it* has
already covered returns without one. Two counters in the file beside the database that its
writers share (``<database>-locks``, mapped into every writer's memory) say which fsyncs have
started and which have finished; a flush that dies half-way leaves "finished" behind
"started", so the next one syncs again. The lock (an OFD lock on a byte of that file) goes
with its process: a killed flusher blocks nobody.

Durability is unchanged: a change is answered only once an fsync that began after its commit
has returned (and the file system could still write then: ``journal_check``), as with
``synchronous=FULL``, and WAL mode under ``NORMAL`` is consistent after a
crash (SQLite syncs the WAL before every checkpoint).
"""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

from . import locks_file, ofd_lock
from .journal_check import JournalCheck
from .locks_file import OWNER, OWNER_AT, SIZE


class WalFlush:
    """Makes this process's commits durable, sharing fsyncs with the other writers of a file.

    Used by one thread at a time (the flusher; the writer itself with group commit off); every
    process writing the file has one.
    """

    def __init__(self, database: Path) -> None:
        self._wal = f"{database}-wal"
        self._wal_fd = -1
        self._file = locks_file.open_shared(database)
        try:
            if os.fstat(self._file).st_size < SIZE:
                os.ftruncate(self._file, SIZE)  # zeros; two processes doing it agree
            self._map = mmap.mmap(self._file, SIZE)
        except BaseException:
            os.close(self._file)
            raise
        # Aligned 8-byte loads and stores: one instruction each on the machines we run on.
        self._started = ctypes.c_uint64.from_buffer(self._map, 0)
        self._finished = ctypes.c_uint64.from_buffer(self._map, 8)
        self._journal = JournalCheck(self._file, SIZE)
        self.fsyncs = 0  # this process's own fsyncs (the rest were shared)

    def record_owner(self, identity: tuple[int, int]) -> None:
        """Note the database file (device, inode) this WAL is written for."""
        self._map[OWNER_AT : OWNER_AT + OWNER.size] = OWNER.pack(*identity)

    def wal_identity(self) -> tuple[int, int] | None:
        """Device and inode of the WAL this process syncs; None before its first sync."""
        if self._wal_fd < 0:
            return None
        found = os.fstat(self._wal_fd)
        return found.st_dev, found.st_ino

    def close(self) -> None:
        del self._started, self._finished  # the map cannot close while they point into it
        self._map.close()
        os.close(self._file)
        if self._wal_fd >= 0:
            os.close(self._wal_fd)

    def started_and_finished(self) -> tuple[int, int]:
        """The machine's fsyncs of this WAL so far: begun, and returned."""
        return self._started.value, self._finished.value

    def after_commit(self) -> None:
        """Return once every commit this process made before the call is on disk."""
        needed = self._started.value + 1  # the first fsync that begins after this point
        ofd_lock.lock(self._file, locks_file.FLUSH)
        try:
            if self._finished.value >= needed:
                return  # another writer's fsync began after our commit and has finished
            number = self._started.value + 1
            self._started.value = number
            self._sync_wal()
            self._finished.value = number
        finally:
            ofd_lock.unlock(self._file, locks_file.FLUSH)

    def _sync_wal(self) -> None:
        # Opened once: the WAL file stays the same while this process's writer connection is
        # open (SQLite removes it only when the last connection closes, and truncates it in
        # place). No stat per flush to check: on ext4 it costs more than the fsync's own CPU.
        if self._wal_fd < 0:
            self._wal_fd = os.open(self._wal, os.O_RDONLY)
        os.fdatasync(self._wal_fd)
        self._journal.check()  # a success ext4 may report for a write its journal dropped
        self.fsyncs += 1
