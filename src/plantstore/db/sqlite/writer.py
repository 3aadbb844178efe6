"""One thread owns SQLite's write connection and commits queued writes in groups.

A durable commit waits for an fsync, so the writer takes every job waiting in its queue,
runs each inside its own savepoint (a failing job fails alone), commits them all, waits for
an fsync of the WAL that began after the commit, and only then answers each caller: group
commit. The model is datasette's write thread. Where the process may run on more than one
core, a second thread, the flusher, waits for the fsync instead, so the writer commits the
next batch meanwhile and one fsync covers every batch committed during the last.

Each process writing a file has one of these (``own_writer``), taking SQLite's lock in turns
with the others; or, with ``PLANTSTORE_SQLITE_WRITERS=one``, the machine has one, in the
process that owns it (``machine_writer``), and the other processes' jobs reach it through
``relay`` and are answered there. Another writer (another worker's, a ``sqlite3`` shell)
takes SQLite's write lock: ``lock.WriteTurns`` waits for it, and answers a wait past the
busy timeout with ``WriteLockTimeout`` (a 503). The lock is held only while the statements
run: the commit does not fsync under it (``synchronous=NORMAL``), and ``flush.WalFlush``
shares each fsync of the WAL with the other writers: one covers every commit made before it
began, whichever process made it.

When the environment fails (a full, failing, read-only or frozen disk, the file replaced) a
write is a 503 that names the trouble (``faults``), never a 500 with a traceback. Every write
has a deadline: a caller waits for it at most ``write_timeout`` seconds (a frozen disk holds
the thread, not the callers), and a job whose caller stopped waiting is not made. After each
commit, before it is answered, the writer checks that the file at the configured path is
still the file it writes (``FileIdentity``): nothing is acknowledged into a removed or
replaced file, nothing more is written until it is back, and the WAL written for a replaced
file is set aside (``wal_owner``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import StoreUnavailable
from ..health import WriteHealth
from . import wal_owner
from .connection import connect
from .faults import FileIdentity, environment_fault, file_replaced
from .flush import WalFlush
from .jobs import Deadlines, Job, Outcome, Reply, answer, first_fault, in_time, job_error
from .lock import WriteTurns
from .ops import AnyOp, P, R, WriteOp, check_submittable

__all__ = ["Reply", "Writer"]

log = logging.getLogger(__name__)

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
        identity: FileIdentity | None = None,
        write_timeout: float = 5.0,
        on_commit: Callable[[int], None] | None = None,
        on_lock_wait: Callable[[float, bool], None] | None = None,
    ):
        self._path = path
        self._identity = identity  # None: the file its connection opens
        self._deadlines = Deadlines()
        self._file: FileIdentity  # the file every commit checks, once the thread runs
        self._file_lost = False  # the file at the path was found to be another, or none
        self._wal_moved = False  # the WAL of a replaced file, moved out of the new one's way
        self._write_timeout = write_timeout
        self._max_batch = max_batch if group_commit else 1
        # A flusher thread lets the next commit run while the disk syncs the last: worth its
        # hand-offs only where it can run beside the writer. A process held to one core (a
        # pinned worker) syncs on the writer's own thread, and so does group commit off (one
        # write, one commit, one fsync). bench/trees.py measures either way, pinned or not.
        self._pipelined = group_commit and len(os.sched_getaffinity(0)) > 1
        self._busy_timeout_ms = busy_timeout_ms
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="plantstore-writer", daemon=True)
        # committed batches, answered by the flusher thread once an fsync has covered them
        self._committed: queue.SimpleQueue[list[Outcome] | None] = queue.SimpleQueue()
        self._flusher: threading.Thread | None = None
        self._disk_failed: StoreUnavailable | None = None  # set by a failed fsync, for good
        self._gone: StoreUnavailable | None = None  # set when the writer thread has ended
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self.commits = 0  # transactions committed (each durable before it is answered)
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
        self._queue.put(None)  # None: stop, once what came before is done
        self._thread.join()

    @property
    def alive(self) -> bool:
        flusher = self._flusher
        alive = self._thread.is_alive() and (flusher is None or flusher.is_alive())
        return alive and self._disk_failed is None

    async def submit(self, op: WriteOp[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Run ``op`` on the connection and ``args`` in the next group commit; its result
        once that is synced. Arguments go by position (as they travel between processes)."""
        check_submittable(op, kwargs)
        return await self.write(op, args)

    async def write(
        self, op: WriteOp[..., R], args: tuple[Any, ...], health: WriteHealth | None = None
    ) -> R:
        """``submit``, for a caller that checked ``op``; its outcome is told to ``health``."""
        if self._gone is not None:
            if health is not None:
                health.refused(self._gone)
            raise self._gone  # never a wait for a writer that is no more
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        deadline = time.monotonic() + self._write_timeout
        self._queue.put(Job(op, args, loop, future, deadline=deadline))
        self._deadlines.watch(loop, future, deadline)
        if health is None:
            return await future
        health.started()
        try:
            result = await future
        except BaseException as exc:
            health.finished(exc)
            raise
        health.finished(None)
        return result

    def submit_nowait(self, op: AnyOp, args: tuple[Any, ...]) -> None:
        """Queue a write nobody waits for (bookkeeping such as a token's last use)."""
        self._queue.put(Job(op, args, None, None))

    def submit_for(
        self, reply: Reply, number: int, op: AnyOp, args: tuple[Any, ...], deadline: float
    ) -> None:
        """Queue another process's job; its outcome goes to ``reply`` under ``number`` (0: a
        write nobody waits for)."""
        if self._gone is not None:
            if number:
                reply.send([(number, None, self._gone)])
            return
        replied = reply if number else None
        self._queue.put(Job(op, args, None, None, replied, number, deadline))

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        flush: WalFlush | None = None
        try:
            # Taking over from another process: never open whatever is at the path now if it
            # is not the file this process opened (none, and SQLite would make an empty one
            # and take the old file's WAL into it).
            lost = None if self._identity is None else self._identity.check()
            if lost is not None:
                raise lost
            conn = connect(self._path, self._busy_timeout_ms)
            self._file = self._identity or FileIdentity(self._path)
            conn.execute("PRAGMA busy_timeout = 0")  # WriteTurns waits for the lock instead
            conn.execute("PRAGMA synchronous = NORMAL")  # WalFlush syncs after the commit
            flush = WalFlush(self._path)
            flush.record_owner(self._file.identity)
            turns = WriteTurns(self._path, self._busy_timeout_ms / 1000, self._on_lock_wait)
        except BaseException as exc:
            if flush is not None:
                flush.close()
            if conn is not None:
                conn.close()
            self._startup_error = exc
            self._ready.set()
            return
        flusher = None
        if self._pipelined:
            flusher = threading.Thread(
                target=self._flush_committed, args=(flush,), name="plantstore-flusher", daemon=True
            )
            flusher.start()
        self._flusher = flusher
        self._ready.set()
        try:
            while self._serve_batch(conn, turns, flush):
                pass
        except Exception:  # a fault of ours: logged once, and every write answered 503
            log.exception("the SQLite writer stopped on a fault; writes are refused")
        finally:
            if flusher is not None:
                self._committed.put(None)
                flusher.join()
            if self._file.check() is not None:  # replaced: its WAL must not meet the new file
                wal_owner.set_aside(self._path, flush.wal_identity())
            turns.close()
            flush.close()
            conn.close()
            self._refuse_what_is_left()

    def _refuse_what_is_left(self) -> None:
        """Once the thread ends (stopped, or on a fault), a write still queued, or submitted
        from now on, is a 503: no caller waits for a writer that is no more."""
        self._gone = StoreUnavailable("the database's writer has stopped; retry shortly")
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(job, Job):
                answer([(job, None, self._gone)])

    def _flush_committed(self, flush: WalFlush) -> None:
        """Answer committed batches once an fsync begun after their commit has returned: one
        fsync for every batch committed while the last one ran (the writer goes on to the
        next batch meanwhile)."""
        stop = False
        while not stop:
            item = self._committed.get()
            pending: list[list[Outcome]] = []
            while True:
                if item is None:
                    stop = True
                else:
                    pending.append(item)
                try:
                    item = self._committed.get_nowait()
                except queue.Empty:
                    break
            if pending:
                self._flush(flush, pending)

    def _flush(self, flush: WalFlush, pending: list[list[Outcome]]) -> None:
        """One fsync for ``pending``, then the answers, if the file is still the database.
        After a failed fsync the kernel may have dropped the pages it could not write, so a
        later fsync that succeeds proves nothing: like PostgreSQL, the writer refuses every
        write from then on (a 503, and readiness fails) until the service is restarted and
        SQLite recovers from the WAL."""
        if self._disk_failed is None:
            try:
                flush.after_commit()
            except Exception as exc:  # OSError from the disk; anything else as unproven
                log.critical("fsync of the WAL failed (%s): writes refused until restart", exc)
                self._disk_failed = StoreUnavailable(
                    "the database's disk failed to sync; writes are refused until a restart",
                    "sync_failed",
                )
        error = self._disk_failed
        for outcomes in pending:
            if error is not None:
                outcomes = [(job, None, error) for job, _, _ in outcomes]
            answer(outcomes)

    def _serve_batch(self, conn: sqlite3.Connection, turns: WriteTurns, flush: WalFlush) -> bool:
        """Commit one group of jobs; return False once asked to stop."""
        first = self._queue.get()
        if first is None:
            return False
        batch = [first]
        keep_going = self._take_waiting(batch)
        alone = all(job.op.background for job in batch)
        if alone and keep_going and time.monotonic() - self._last_request_write < BUSY_WINDOW_S:
            keep_going = self._wait_for_company(batch)
        if not all(job.op.background for job in batch):
            self._last_request_write = time.monotonic()
        self._commit(conn, turns, flush, batch)
        return keep_going

    def _wait_for_company(self, batch: list[Job]) -> bool:
        """Give a request's write ``BACKGROUND_WAIT_S`` to join a batch of background jobs;
        return False if asked to stop."""
        try:
            company = self._queue.get(timeout=BACKGROUND_WAIT_S)
        except queue.Empty:
            return True
        if company is None:
            return False
        batch.append(company)
        return self._take_waiting(batch)

    def _take_waiting(self, batch: list[Job]) -> bool:
        """Add the jobs waiting now, up to the batch size; return False if asked to stop."""
        while len(batch) < self._max_batch:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return True
            if job is None:
                return False
            batch.append(job)
        return True

    def _commit(
        self, conn: sqlite3.Connection, turns: WriteTurns, flush: WalFlush, batch: list[Job]
    ) -> None:
        batch = in_time(batch)
        refusal = self._disk_failed
        if refusal is None and self._file_lost:  # until the file at the path is ours again
            refusal = file_replaced() if self._wal_moved else self._file.check()
            self._file_lost = refusal is not None
        if refusal is not None or not batch:
            answer([(job, None, refusal) for job in batch])
            return
        outcomes: list[Outcome] = []
        try:
            turns.begin(conn)
            for job in batch:
                outcomes.append(self._run_job(conn, job))
            conn.execute("COMMIT")
            self.commits += 1
            self.jobs_committed += len(batch)
            if self._on_commit is not None:
                self._on_commit(len(batch))
        except Exception as exc:
            # A fault of the environment (a job's own, if SQLite undid the transaction for
            # it) is every job's 503, told by whoever waits; anything else is a fault of ours.
            fault = environment_fault(exc) or first_fault(outcomes)
            if fault is None:
                log.exception("group commit of %d writes failed", len(batch))
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):  # the disk may refuse this too
                    conn.execute("ROLLBACK")
            outcomes = [(job, None, fault or exc) for job in batch]
        else:
            lost = self._file.check()  # once a commit: nothing acknowledged into a lost file
            if lost is not None:
                self._lose_file(flush)
                answer([(job, None, lost) for job in batch])
                return
            _mark_for_readers(conn)
            if self._pipelined:
                self._committed.put(outcomes)  # answered once an fsync has covered the commit
            else:
                self._flush(flush, [outcomes])  # the fsync here, before the next batch begins
            return
        answer(outcomes)

    def _lose_file(self, flush: WalFlush) -> None:
        """The file at the path is no longer the one written: refuse writes until it is back,
        and if another is there, set the WAL written for the old one aside, where the next
        open of the new file cannot apply it; then refuse them until a restart."""
        self._file_lost = True
        if not self._wal_moved:
            self._wal_moved = wal_owner.set_aside(self._path, flush.wal_identity())

    @staticmethod
    def _run_job(conn: sqlite3.Connection, job: Job) -> Outcome:
        op = job.op
        if op.one_write:
            try:
                return job, op.fn(conn, *job.args), None
            except Exception as exc:
                return job, None, job_error(conn, exc)
        conn.execute("SAVEPOINT job")
        try:
            result = op.fn(conn, *job.args)
        except Exception as exc:
            error = job_error(conn, exc)
            conn.execute("ROLLBACK TO job")
            conn.execute("RELEASE job")
            return job, None, error
        conn.execute("RELEASE job")
        return job, result, None


def _mark_for_readers(conn: sqlite3.Connection) -> None:
    """Read once after a commit, which records a read mark for it in ``-shm``; else the next
    reader writes it, and on a frozen disk that write blocks its event loop until the thaw."""
    with contextlib.suppress(sqlite3.Error):
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 0").fetchall()
