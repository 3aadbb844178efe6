"""One thread owns SQLite's write connection and commits queued writes in groups.

With ``synchronous=FULL`` every commit waits for an fsync, so the writer takes every job
waiting in its queue, runs each inside its own savepoint (a failing job fails alone),
commits them all with one fsync, and only then answers each caller: group commit. The
model is datasette's write thread.

Several processes (``serve --workers N``, a CLI command beside a server) each have a writer
of their own on one file; ``lock.WriteTurns`` has them take SQLite's write lock in
turns, and answers a wait past the busy timeout with ``WriteLockTimeout`` (a 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .connection import connect
from .lock import WriteLockTimeout, WriteTurns

log = logging.getLogger(__name__)

WriteFn = Callable[[sqlite3.Connection], Any]


@dataclass(slots=True)
class _Job:
    fn: WriteFn
    loop: asyncio.AbstractEventLoop | None
    future: asyncio.Future[Any] | None
    one_write: bool = False  # writes with one statement at most: no savepoint needed
    background: bool = False  # may wait a moment to share a request's commit (the purge)


_STOP = object()
# How long a batch of background jobs alone waits for a request's write to share its commit
# (joined, a purge step costs that write the step's statements, not a commit of its own), while
# requests' writes are coming in: one was committed in the last BUSY_WINDOW_S. On an idle
# server nobody can wait behind it, and it goes at once.
BACKGROUND_WAIT_S = 0.02
BUSY_WINDOW_S = 1.0


class Writer:
    """Runs write jobs on a dedicated thread; ``submit`` resolves after the commit is synced."""

    def __init__(
        self,
        path: Path,
        *,
        group_commit: bool,
        max_batch: int,
        busy_timeout_ms: int,
        on_commit: Callable[[int], None] | None = None,
        on_lock_wait: Callable[[float, bool], None] | None = None,
    ):
        self._path = path
        self._max_batch = max_batch if group_commit else 1
        self._busy_timeout_ms = busy_timeout_ms
        self._queue: queue.SimpleQueue[_Job | object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="plantstore-writer", daemon=True)
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self.commits = 0  # transactions committed (one fsync each)
        self.jobs_committed = 0  # writes those transactions carried
        self._on_commit = on_commit  # told each commit's number of writes (for metrics)
        # told each wait for another process's lock: seconds, and whether it timed out
        self._on_lock_wait = on_lock_wait
        self._last_request_write = -BUSY_WINDOW_S  # monotonic; of a job not in the background

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            raise self._startup_error

    def stop(self) -> None:
        """Commit everything queued so far, then end the thread."""
        self._queue.put(_STOP)
        self._thread.join()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    async def submit(
        self, fn: WriteFn, *, one_write: bool = False, background: bool = False
    ) -> Any:
        """Run ``fn`` in the next group commit and return its result once that is synced.

        ``one_write`` promises that ``fn`` changes the database with one statement at most.
        SQLite undoes a failed statement by itself, so such a job runs without the savepoint
        that otherwise keeps a failing job from taking its batch down (two statements less).
        ``background`` lets the job wait up to ``BACKGROUND_WAIT_S`` for a request's write to
        share its commit, so that it adds no commit of its own for requests to wait behind.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.put(_Job(fn, loop, future, one_write, background))
        return await future

    def submit_nowait(self, fn: WriteFn) -> None:
        """Queue a write nobody waits for (bookkeeping such as a token's last use)."""
        self._queue.put(_Job(fn, None, None))

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            conn = connect(self._path, self._busy_timeout_ms)
            conn.execute("PRAGMA busy_timeout = 0")  # WriteTurns waits for the lock instead
            turns = WriteTurns(self._path, self._busy_timeout_ms / 1000, self._on_lock_wait)
        except BaseException as exc:
            if conn is not None:
                conn.close()
            self._startup_error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            while self._serve_batch(conn, turns):
                pass
        finally:
            turns.close()
            conn.close()

    def _serve_batch(self, conn: sqlite3.Connection, turns: WriteTurns) -> bool:
        """Commit one group of jobs; return False once asked to stop."""
        first = self._queue.get()
        if first is _STOP:
            return False
        batch: list[_Job] = [first]  # type: ignore[list-item]
        keep_going = self._take_waiting(batch)
        alone = all(job.background for job in batch)
        if alone and keep_going and time.monotonic() - self._last_request_write < BUSY_WINDOW_S:
            keep_going = self._wait_for_company(batch)
        if not all(job.background for job in batch):
            self._last_request_write = time.monotonic()
        self._commit(conn, turns, batch)
        return keep_going

    def _wait_for_company(self, batch: list[_Job]) -> bool:
        """Give a request's write ``BACKGROUND_WAIT_S`` to join a batch of background jobs;
        return False if asked to stop."""
        try:
            company = self._queue.get(timeout=BACKGROUND_WAIT_S)
        except queue.Empty:
            return True
        if company is _STOP:
            return False
        batch.append(company)  # type: ignore[arg-type]
        return self._take_waiting(batch)

    def _take_waiting(self, batch: list[_Job]) -> bool:
        """Add the jobs waiting now, up to the batch size; return False if asked to stop."""
        while len(batch) < self._max_batch:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return True
            if job is _STOP:
                return False
            batch.append(job)  # type: ignore[arg-type]
        return True

    def _commit(self, conn: sqlite3.Connection, turns: WriteTurns, batch: list[_Job]) -> None:
        outcomes: list[tuple[_Job, Any, BaseException | None]] = []
        try:
            turns.begin(conn)
            for job in batch:
                outcomes.append(self._run_job(conn, job))
            conn.execute("COMMIT")
            self.commits += 1
            self.jobs_committed += len(batch)
            if self._on_commit is not None:
                self._on_commit(len(batch))
        except WriteLockTimeout as exc:
            log.warning(
                "SQLite's write lock was held elsewhere too long: %d writes refused", len(batch)
            )
            outcomes = [(job, None, exc) for job in batch]
        except Exception as exc:
            log.exception("group commit of %d writes failed", len(batch))
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            outcomes = [(job, None, exc) for job in batch]
        _answer(outcomes)

    @staticmethod
    def _run_job(conn: sqlite3.Connection, job: _Job) -> tuple[_Job, Any, BaseException | None]:
        if job.one_write:
            try:
                return job, job.fn(conn), None
            except Exception as exc:
                return job, None, exc
        conn.execute("SAVEPOINT job")
        try:
            result = job.fn(conn)
        except Exception as exc:
            conn.execute("ROLLBACK TO job")
            conn.execute("RELEASE job")
            return job, None, exc
        conn.execute("RELEASE job")
        return job, result, None


def _answer(outcomes: list[tuple[_Job, Any, BaseException | None]]) -> None:
    """Hand results back to each caller's event loop, one wake-up per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Job, Any, BaseException | None]]] = {}
    for outcome in outcomes:
        loop = outcome[0].loop
        if loop is not None:
            by_loop.setdefault(loop, []).append(outcome)
    for loop, items in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop has nobody waiting
            loop.call_soon_threadsafe(_resolve, items)


def _resolve(items: list[tuple[_Job, Any, BaseException | None]]) -> None:
    for job, result, error in items:
        future = job.future
        if future is None or future.done():  # the caller went away
            continue
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
