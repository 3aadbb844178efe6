"""Each process commits its own writes; the machine shares the fsync that makes them durable.

The way PostgreSQL's backends write: each inserts its own WAL records, and one flush covers
every commit made before it began. Here each worker's ``writer.Writer`` groups that worker's
writes into its own commits, takes SQLite's write lock in turns with the other processes
(``lock.WriteTurns``: a waiter is let in before the holder begins again), and answers them
once ``flush.WalFlush`` has seen an fsync that began after the commit, whichever process ran
it. Nothing crosses between processes but the lock and two counters, so a second worker adds
its own core to the writes instead of handing each one to the first (``machine_writer``, the
alternative ``PLANTSTORE_SQLITE_WRITERS=one`` keeps: bench/README.md has both measured).

Each such process holds a shared lock on ``WRITER`` in ``<database>-locks`` while it writes, so
whatever needs the file to itself (``db restore``) sees a server holding it, and a process of
the other setting (which takes that lock alone) is refused rather than writing beside them.

A worker killed in its transaction never committed it, so never answered it: SQLite undoes
it, the kernel drops the dead worker's locks, and the other workers write on (nothing they
acknowledged waited on it).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ...errors import StoreUnavailable
from ..health import WriteHealth
from . import locks_file, ofd_lock
from .locks_file import WRITER
from .ops import P, R, WriteOp, check_submittable
from .writer import Writer

_ONE_WRITER_THERE = (
    "another process owns this database's writer (PLANTSTORE_SQLITE_WRITERS=one): "
    "run every process on it with the same setting"
)


class OwnWriter:
    """This process's writer of one file, beside any other process's."""

    def __init__(
        self, path: Path, make_writer: Callable[[], Writer], health: WriteHealth | None = None
    ) -> None:
        self.health = health or WriteHealth()
        self._path = path
        self._make_writer = make_writer
        self._engine: Writer | None = None
        self._lock = -1

    @property
    def engine(self) -> Writer | None:
        """The writer itself, once open."""
        return self._engine

    async def open(self) -> None:
        lock = locks_file.open_shared(self._path)
        try:
            if not ofd_lock.try_lock(lock, WRITER, shared=True):
                raise StoreUnavailable(_ONE_WRITER_THERE, "writer_mode")
            engine = self._make_writer()
            engine.start()
        except BaseException:
            os.close(lock)  # and its lock with it
            raise
        self._lock, self._engine = lock, engine

    def submit(self, op: WriteOp[P, R], *args: P.args, **kwargs: P.kwargs) -> Awaitable[R]:
        """Run ``op`` on the connection and ``args`` in this process's next group commit; its
        result once an fsync has covered it. Its outcome is told to ``health``."""
        check_submittable(op, kwargs)
        return self._opened().write(op, args, self.health)

    def submit_nowait(self, op: WriteOp[P, Any], *args: P.args, **kwargs: P.kwargs) -> None:
        """Queue a write nobody waits for (a token's last use)."""
        check_submittable(op, kwargs)
        self._opened().submit_nowait(op, args)

    def stop(self) -> None:
        """Commit and answer every write taken; any later write is a 503 (the writer's)."""
        if self._engine is not None:
            self._engine.stop()  # a second stop finds its thread ended, and returns
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    def _opened(self) -> Writer:
        if self._engine is None:
            raise RuntimeError("the store is not open")
        return self._engine
