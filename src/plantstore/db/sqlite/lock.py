"""Taking SQLite's write lock in turns when several processes write one file.

``serve --workers N`` gives each worker a writer of its own, and SQLite's write lock takes
their transactions one at a time. Left to SQLite, a waiter sleeps in its busy handler (up to
100 ms between tries, never woken when the lock frees). Polling instead is quicker but not
fair: a busy writer commits and takes the lock again within microseconds, so a poller can
miss every window, and its requests wait for as long as a second. So waiters announce
themselves, and a writer lets a waiter in before it begins again:

- A writer refused the lock holds the shared ``WAITERS`` lock of the file beside the
  database (``<database>-locks``, ``locks_file``) until it gets the lock, and tries again
  every 0.2 ms at first and never more than 1 ms apart, for up to the busy timeout; past it,
  ``WriteLockTimeout``.
- Before it begins, a writer checks for such a waiter (``F_OFD_GETLK``: whether an exclusive
  lock would wait). If there is one, it pauses until the waiter has taken the lock, for at
  most 5 ms.

Those OFD locks go with their process: a waiter that dies announces nothing any more.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from ...errors import StoreUnavailable
from . import locks_file, ofd_lock
from .locks_file import WAITERS

_FIRST_PAUSE = 0.0002
_LONGEST_PAUSE = 0.001
_LONGEST_COURTESY = 0.005  # the most a writer waits for a waiter to go first


class WriteLockTimeout(StoreUnavailable):
    """Another process held SQLite's write lock for longer than the busy timeout: a 503."""

    def __init__(self) -> None:
        super().__init__("the database is busy with other writes; retry shortly", "busy")


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite refused for a lock held elsewhere ("database is locked" or "busy")."""
    primary = exc.sqlite_errorcode & 0xFF  # extended codes (SQLITE_BUSY_RECOVERY...) too
    return primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class WriteTurns:
    """Begins write transactions on one connection, taking turns with other processes.

    ``on_wait`` hears each wait for another process's lock: its seconds, and whether it
    timed out. Used from one thread (the writer's).
    """

    def __init__(
        self,
        database: Path,
        timeout: float,
        on_wait: Callable[[float, bool], None] | None = None,
    ) -> None:
        self._waiters = locks_file.open_shared(database)  # an open of its own: its locks
        self._timeout = timeout
        self._on_wait = on_wait

    def close(self) -> None:
        os.close(self._waiters)

    def begin(self, conn: sqlite3.Connection) -> None:
        """``BEGIN IMMEDIATE``, after any waiting writer, waiting for the lock if need be."""
        self._let_a_waiter_in()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            self._wait_and_begin(conn)

    def _let_a_waiter_in(self) -> None:
        deadline = 0.0
        while not self._nobody_waits():
            now = time.monotonic()
            deadline = deadline or now + _LONGEST_COURTESY
            if now >= deadline:
                return
            time.sleep(_FIRST_PAUSE)

    def _nobody_waits(self) -> bool:
        return not ofd_lock.held_elsewhere(self._waiters, WAITERS)

    def _wait_and_begin(self, conn: sqlite3.Connection) -> None:
        started = time.monotonic()
        pause = _FIRST_PAUSE
        ofd_lock.lock(self._waiters, WAITERS, shared=True)  # "a writer is waiting"
        try:
            while True:
                time.sleep(pause)
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    break
                except sqlite3.OperationalError as exc:
                    if not is_busy(exc):
                        raise
                if time.monotonic() - started >= self._timeout:
                    self._waited(time.monotonic() - started, timed_out=True)
                    raise WriteLockTimeout()
                pause = min(pause * 2, _LONGEST_PAUSE)
        finally:
            ofd_lock.unlock(self._waiters, WAITERS)
        self._waited(time.monotonic() - started, timed_out=False)

    def _waited(self, seconds: float, *, timed_out: bool) -> None:
        if self._on_wait is not None:
            self._on_wait(seconds, timed_out)
