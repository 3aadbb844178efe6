"""One SQLite file as the features' stores share it: a reader connection and the writer.

WAL lets reads run beside the writer, so a read never waits for a commit. Reads are short
indexed lookups, so they run inline on the event loop rather than paying a thread hop; writes
go through the machine's group-commit writer (``machine_writer.py``): one per file, owned by
one process and reached by the others.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ...errors import StoreUnavailable
from .connection import connect
from .lock import is_busy
from .machine_writer import MachineWriter
from .writer import Writer


class SQLiteDatabase:
    """The embedded default backend; every worker process has one, on the same file."""

    def __init__(
        self,
        path: Path,
        *,
        group_commit: bool = True,
        max_batch: int = 512,
        busy_timeout_ms: int = 5_000,
        on_commit: Callable[[int], None] | None = None,
        on_lock_wait: Callable[[float, bool], None] | None = None,
    ) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self.writer = MachineWriter(
            path,
            lambda: Writer(
                path,
                group_commit=group_commit,
                max_batch=max_batch,
                busy_timeout_ms=busy_timeout_ms,
                on_commit=on_commit,
                on_lock_wait=on_lock_wait,
            ),
            # as long as a write may wait for another process's lock, and a moment more
            patience=busy_timeout_ms / 1000 + 1.0,
        )
        self._reader: sqlite3.Connection | None = None

    async def open(self) -> None:
        self._reader = connect(self.path, self.busy_timeout_ms)
        await self.writer.open()

    async def close(self) -> None:
        self.writer.stop()
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    @property
    def reader(self) -> sqlite3.Connection:
        """The connection reads run on (in this process's event loop thread)."""
        if self._reader is None:
            raise RuntimeError("the store is not open")
        return self._reader

    def read(self, query: str, params: Iterable[Any] = ()) -> sqlite3.Cursor:
        """Run a read; one that waited out the busy timeout is a 503, as a write's would be."""
        try:
            return self.reader.execute(query, tuple(params))
        except sqlite3.OperationalError as exc:
            raise unavailable_if_busy(exc) from exc

    async def ping(self) -> None:
        self.reader.execute("SELECT 1 FROM secrets LIMIT 1").fetchone()
        if not await self.writer.ready():
            raise RuntimeError("the machine's SQLite writer is not answering")


def unavailable_if_busy(exc: sqlite3.OperationalError) -> Exception:
    """A read that waited out the busy timeout (rare in WAL: recovery, a checkpoint's reset)
    is a 503 like a write's; any other failure stays what it is."""
    return StoreUnavailable("the database is busy; retry shortly") if is_busy(exc) else exc
