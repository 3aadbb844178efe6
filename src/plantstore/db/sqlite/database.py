"""One SQLite file as the features' stores share it: a reader connection and the writer.

WAL lets reads run beside the writer, so a read never waits for a commit. Reads are short
indexed lookups, so they run inline on the event loop rather than paying a thread hop; writes
go through a group-commit writer: this process's own, sharing each fsync with the other
processes' (``own_writer.py``, what ``serve`` runs), or the machine's one, owned by one process
and reached by the others (``machine_writer.py``).

Every few tenths of a second a read checks that the file at the configured path is still the
one this process opened; if not, reads are refused as writes are (``faults.FileIdentity``).
``ready`` answers ``/readyz`` from what the writes of this process already showed
(``health.WriteHealth``), or with one tiny write when none came lately.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ...errors import StoreUnavailable
from ..health import Readiness, WriteHealth
from .connection import connect
from .faults import FileIdentity, environment_fault
from .machine_writer import MachineWriter
from .ops import WriteOp
from .own_writer import OwnWriter
from .writer import Writer

ProcessWriter = OwnWriter | MachineWriter  # how this process's writes reach a commit

IDENTITY_CHECK_S = 0.25  # how often reads look at the file behind the path


class SQLiteDatabase:
    """The embedded default backend; every worker process has one, on the same file."""

    def __init__(
        self,
        path: Path,
        *,
        group_commit: bool = True,
        max_batch: int = 512,
        busy_timeout_ms: int = 5_000,
        write_timeout: float = 5.0,
        each_process_writes: bool = True,
        on_commit: Callable[[int], None] | None = None,
        on_lock_wait: Callable[[float, bool], None] | None = None,
        on_refusal: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._identity: FileIdentity | None = None
        self._file_fault: StoreUnavailable | None = None
        self._next_identity_check = 0.0

        def make_writer() -> Writer:
            return Writer(
                path,
                group_commit=group_commit,
                max_batch=max_batch,
                busy_timeout_ms=busy_timeout_ms,
                identity=self._opened(),
                write_timeout=write_timeout,
                on_commit=on_commit,
                on_lock_wait=on_lock_wait,
            )

        health = WriteHealth(on_refusal)
        self.writer: ProcessWriter = (
            OwnWriter(path, make_writer, health)
            if each_process_writes
            else MachineWriter(path, make_writer, patience=write_timeout, health=health)
        )
        self._readiness = Readiness(self.writer.health, self._probe)
        self._reader: sqlite3.Connection | None = None

    async def open(self) -> None:
        self._reader = connect(self.path, self.busy_timeout_ms)
        self._identity = FileIdentity(self.path)
        await self.writer.open()

    def _opened(self) -> FileIdentity:
        if self._identity is None:
            raise RuntimeError("the store is not open")
        return self._identity

    async def close(self) -> None:
        self.writer.stop()
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    @property
    def reader(self) -> sqlite3.Connection:
        """The connection reads run on (in this process's event loop thread); a 503 while
        the file at the path is not the one it reads."""
        if self._reader is None:
            raise RuntimeError("the store is not open")
        now = time.monotonic()
        if now >= self._next_identity_check:
            self._next_identity_check = now + IDENTITY_CHECK_S
            self._file_fault = self._opened().check()
        if self._file_fault is not None:
            self.writer.health.refused(self._file_fault)
            raise self._file_fault
        return self._reader

    def read(self, query: str, params: Iterable[Any] = ()) -> sqlite3.Cursor:
        """Run a read; a fault of the environment is a 503, as a write's would be."""
        try:
            return self.reader.execute(query, tuple(params))
        except sqlite3.Error as exc:
            raise unavailable_if_environment(exc) from exc

    async def ready(self) -> None:
        """Return if a write would be taken now; raise the 503 that says why not."""
        fault = self._opened().check()
        if fault is not None:
            raise fault
        await self._readiness.check()

    async def _probe(self) -> None:
        await self.writer.submit(PROBE)


def _probe(conn: sqlite3.Connection) -> None:
    """One tiny write: the header's user version written back as it is (a page to the WAL,
    and its fsync), after a look at the service's own table of secrets."""
    conn.execute("SELECT 1 FROM secrets LIMIT 1").fetchone()
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    conn.execute(f"PRAGMA user_version = {int(version)}")


PROBE = WriteOp(_probe, one_write=True)


def unavailable_if_environment(exc: sqlite3.Error) -> Exception:
    """A read refused by the environment (busy past the busy timeout, the disk failing) is
    a 503 like a write's; any other failure stays what it is."""
    return environment_fault(exc) or exc
