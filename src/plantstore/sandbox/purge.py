"""The background purge of expired sandbox users, one task in each serving process.

Every ``interval`` it deletes the users whose sandbox expired, with all they own, in steps of
at most ``STEP_ROWS`` rows (see ``sqlite.py`` and ``postgres.py`` for how each backend keeps a
step from stalling other users' requests). Several processes purging at once is safe: on
SQLite their steps take the write lock in turns, on PostgreSQL they skip each other's users.
A failing step (the database away) is logged and retried at the next interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from ..db import describe_failure
from .store import SandboxStore

log = logging.getLogger(__name__)

# Rows one step deletes at most; each step is one job of SQLite's writer (or one transaction on
# PostgreSQL), so its statements are the most another user's write can wait on the purge. On
# SQLite a step waits a moment to share a request's commit rather than add one of its own.
STEP_ROWS = 100
# The purge rests between steps three times as long as a step's statements took, so it uses
# at most a quarter of the writer (and of the core it shares with the requests).
REST_PER_STEP = 3.0
# A request authenticated an instant before its token expired may still be writing: the
# purge leaves a user alone for this long after its expiry.
GRACE_SECONDS = 2.0


def purge_interval(ttl_seconds: int) -> float:
    """How often to look for expired users: a tenth of the TTL, within 1 s and 60 s."""
    return min(60.0, max(1.0, ttl_seconds / 10))


@dataclass
class PurgeRun:
    """What one purge did: rows deleted, the steps it took, and the longest a step held the
    writer (SQLite) or its transaction (PostgreSQL)."""

    rows: int = 0
    steps: int = 0
    longest_hold_s: float = 0.0


async def purge_expired(
    store: SandboxStore, now: float | None = None, run: PurgeRun | None = None
) -> PurgeRun:
    """Delete every sandbox user expired (plus the grace) before ``now``, a step at a time,
    counting into ``run`` (so a caller stopped midway still knows what was done)."""
    before = (time.time() if now is None else now) - GRACE_SECONDS
    run = PurgeRun() if run is None else run
    while True:
        deleted, held = await store.purge_expired_users(before, STEP_ROWS)
        if not deleted:
            return run
        run.rows += deleted
        run.steps += 1
        run.longest_hold_s = max(run.longest_hold_s, held)
        await asyncio.sleep(REST_PER_STEP * held)


async def forget_old_issues(store: SandboxStore, before: float) -> int:
    """Delete the issuance rows that no longer count against an address, a step at a time."""
    forgotten = 0
    while (step := await store.forget_issues(before, STEP_ROWS)) > 0:
        forgotten += step
        if step < STEP_ROWS:
            break
    return forgotten


class SandboxPurge:
    """Runs ``purge_expired`` every ``interval`` seconds until stopped, and forgets issuance
    rows older than ``issue_window`` seconds (the issuance limit's window)."""

    def __init__(self, store: SandboxStore, interval: float, issue_window: float = 0.0) -> None:
        self._store = store
        self._interval = interval
        self._issue_window = issue_window
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sandbox-purge")

    async def begin(self) -> None:
        """``start``, as the machine's background jobs are started."""
        self.start()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            started = time.monotonic()
            run = PurgeRun()
            try:
                await purge_expired(self._store, run=run)
                await forget_old_issues(self._store, time.time() - self._issue_window)
            except asyncio.CancelledError:  # the server stops: say what was done before it did
                _report(run, started, " before the server stopped")
                raise
            except Exception as exc:  # the database away, or a fault: try again later
                log.warning("sandbox purge failed, retrying later: %s", describe_failure(exc))
                continue
            _report(run, started)


def _report(run: PurgeRun, started: float, note: str = "") -> None:
    if run.rows:
        log.info(
            "sandbox purge deleted %d rows in %.2f s (%d steps, the longest held %.1f ms)%s",
            run.rows,
            time.monotonic() - started,
            run.steps,
            run.longest_hold_s * 1000,
            note,
        )
