"""One writer per SQLite file per machine (``PLANTSTORE_SQLITE_WRITERS=one``): every process's
writes share its group commits. (The default gives each process a writer of its own instead:
``own_writer``.)

Each process that writes a file (the workers of ``serve``, a CLI command beside them) tries to
take the exclusive ``WRITER`` lock of ``<database>-locks`` (``locks_file``). The one that holds
it owns the writer (``writer.Writer``), writes its pid there, and serves the others' writes
over a Unix socket (``relay``); the others send theirs there, and wait for the lock in a
thread meanwhile. The kernel drops the lock of an owner that dies, however it dies: a waiting
process takes it within milliseconds and owns the writer from then on. Writes caught in
between, sent to the owner that died, are answered 503 with ``Retry-After``; none is
acknowledged before it is fsynced, so a retry of a create finds it or makes it. A write that
certainly was not taken (the owner stopped before reading it, or none listened yet) is sent
again to the next owner, for as long as a write may wait for an answer.

One commit for every worker's writes means bigger batches than a writer per process, but
every write of another worker is pickled, sent, taken by the owner's threads and answered
back, all under the owner's one interpreter lock: on two cores that costs more than the
bigger batches save (bench/README.md measures both).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ...errors import StoreUnavailable
from ..health import WriteHealth
from . import locks_file, ofd_lock
from .locks_file import WRITER
from .ops import AnyOp, P, R, WriteOp, check_submittable
from .relay import RemoteWriter, Service, WriteNotTaken, writer_gone
from .writer import Writer

log = logging.getLogger(__name__)

CONNECT_WAIT_S = 5.0  # how long an opening process waits for a new owner to listen
RETRY_PAUSE_S = 0.005  # between sends of a write no owner took
_EACH_WRITES_THERE = (
    "other processes write this database each with a writer of its own "
    "(PLANTSTORE_SQLITE_WRITERS=each): run every process on it with the same setting"
)


def writer_address(lock: int) -> str:
    """The socket's abstract name: the same for every process that locks the same file."""
    found = os.fstat(lock)
    return f"\0plantstore-writer-{found.st_dev:x}-{found.st_ino:x}"


class MachineWriter:
    """This process's way to the machine's writer of one file, whoever owns it."""

    def __init__(
        self,
        path: Path,
        make_writer: Callable[[], Writer],
        patience: float,
        health: WriteHealth | None = None,
    ) -> None:
        """``patience``: how long another process waits for the owner's answer (then 503)."""
        self.health = health or WriteHealth()
        self._path = path
        self._patience = patience
        self._make_writer = make_writer
        self._lock = -1
        self._address = ""
        self._engine: Writer | None = None  # set while this process owns the writer
        self._service: Service | None = None
        self._remote: RemoteWriter | None = None
        self._stopping = False
        self._owning = threading.Lock()  # taken while becoming the owner, and while stopping

    @property
    def engine(self) -> Writer | None:
        """The writer itself, in the process that owns it."""
        return self._engine

    async def open(self) -> None:
        self._lock = locks_file.open_shared(self._path)
        self._address = writer_address(self._lock)
        if self._try_to_own():
            return
        self._remote = RemoteWriter(self._address, self._patience)
        deadline = time.monotonic() + CONNECT_WAIT_S
        while True:
            try:
                await self._remote.connect()
                break
            except StoreUnavailable:
                if self._try_to_own():
                    return
                if self._held_by_each():
                    raise StoreUnavailable(_EACH_WRITES_THERE, "writer_mode") from None
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.01)  # an owner between its lock and its socket
        threading.Thread(
            target=self._wait_to_own, name="plantstore-writer-wait", daemon=True
        ).start()

    def _held_by_each(self) -> bool:
        """Whether processes writing each for itself hold the writer's lock (shared)."""
        held = ofd_lock.held_elsewhere(self._lock, WRITER)
        return held and not ofd_lock.held_elsewhere(self._lock, WRITER, alone=True)

    def _try_to_own(self) -> bool:
        if not ofd_lock.try_lock(self._lock, WRITER):
            return False
        self._become_owner()
        return True

    def _wait_to_own(self) -> None:
        """Block until the owner is gone, then own the writer (unless this process stops)."""
        try:
            ofd_lock.lock(self._lock, WRITER)
        except OSError:
            return  # closed by stop
        try:
            self._become_owner()
        except Exception:
            log.exception("could not take over the database's writer; writes are refused")

    def _become_owner(self) -> None:
        with self._owning:
            if self._stopping:
                return
            self._record_pid()
            engine = self._make_writer()
            try:
                engine.start()
                service = Service(engine, self._address)
            except BaseException:
                engine.stop()  # its thread has ended, or ends now
                ofd_lock.unlock(self._lock, WRITER)  # another process may do better
                raise
            service.start()
            self._service = service
            self._engine = engine
        if self._remote is not None:  # it had been another process's
            log.warning("this process took over the database's writer (pid %d)", os.getpid())
        else:
            log.info("this process owns the database's writer (pid %d)", os.getpid())

    def _record_pid(self) -> None:
        """For whoever asks which process owns the writer; owning does not depend on it."""
        try:
            locks_file.record_writer_pid(self._lock)
        except OSError as exc:
            log.warning("could not note this process as the writer's owner: %s", exc)

    def submit(self, op: WriteOp[P, R], *args: P.args, **kwargs: P.kwargs) -> Awaitable[R]:
        """Run ``op`` on the connection and ``args`` in the machine's next group commit; its
        result once that is fsynced. ``args`` go by position and must pickle (plain values):
        they may travel to another process. Its outcome is told to ``health``."""
        check_submittable(op, kwargs)
        engine = self._engine
        if engine is not None:
            return engine.write(op, args, self.health)
        return self._submit_remote(op, args)

    async def _submit_remote(self, op: WriteOp[..., R], args: tuple[Any, ...]) -> R:
        health = self.health
        health.started()
        try:
            result: R = await self._relay(op, args)
        except BaseException as exc:
            health.finished(exc)
            raise
        health.finished(None)
        return result

    async def _relay(self, op: AnyOp, args: tuple[Any, ...]) -> Any:
        """To the owner; sent again to the next one while none took it (the next owner may
        be this process: then to its own writer)."""
        deadline = time.monotonic() + self._patience
        while True:
            if self._remote is None or self._stopping:
                raise writer_gone()
            try:
                return await self._remote.submit(op, args)
            except WriteNotTaken:
                if time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(RETRY_PAUSE_S)  # for the next owner: this process, or another
            engine = self._engine
            if engine is not None:
                return await engine.write(op, args)

    def submit_nowait(self, op: WriteOp[P, Any], *args: P.args, **kwargs: P.kwargs) -> None:
        """Queue a write nobody waits for (a token's last use); lost if no writer answers."""
        check_submittable(op, kwargs)
        engine = self._engine
        if engine is not None:
            engine.submit_nowait(op, args)
        elif self._remote is not None and not self._stopping:
            task = asyncio.get_running_loop().create_task(self._remote.submit_nowait(op, args))
            task.add_done_callback(_forget)

    def stop(self) -> None:
        """Commit and answer every write taken, then let another process own the writer."""
        with self._owning:
            self._stopping = True
        engine, service = self._engine, self._service
        self._engine = self._service = None  # a second stop has nothing left to do
        if engine is not None and service is not None:
            service.stop_taking()
            if engine.alive:
                engine.stop()
            service.close()
        if self._remote is not None:
            self._remote.close()
        if self._lock >= 0:
            os.close(self._lock)  # the lock goes with it; a waiting thread gives up
            self._lock = -1


def _forget(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()  # a bookkeeping write that found no writer: nothing waits for it
