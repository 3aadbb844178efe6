"""Retention for webhook records, in bounded steps: attempt records and finished deliveries
older than the retention go, and due deliveries of disabled subscriptions (a race's
leftovers) fail.

Each step touches at most ``STEP_ROWS`` rows (one job of SQLite's writer, one statement on
PostgreSQL), and the pruning rests between steps ``REST_PER_STEP`` times as long as a step
took, so requests' writes never wait long behind it, as in the sandbox purge.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from .store import WebhookStore

STEP_ROWS = 500
REST_PER_STEP = 3.0
T = TypeVar("T")


@dataclass
class PruneRun:
    """Rows deleted (or failed), the steps taken, and the longest a step took."""

    rows: int = 0
    steps: int = 0
    longest_step_s: float = 0.0

    async def step(self, work: Awaitable[T]) -> T:
        started = time.monotonic()
        result = await work
        took = time.monotonic() - started
        self.steps += 1
        self.longest_step_s = max(self.longest_step_s, took)
        await asyncio.sleep(REST_PER_STEP * took)
        return result


async def prune(store: WebhookStore, before: float, now: float | None = None) -> PruneRun:
    """Delete what is older than ``before``, a bounded step at a time."""
    now = time.time() if now is None else now
    run = PruneRun()
    while True:
        deleted = await run.step(store.prune_attempts(before, STEP_ROWS))
        run.rows += deleted
        if deleted < STEP_ROWS:
            break
    after: int | None = 0
    while after is not None:
        deleted, after = await run.step(store.prune_deliveries(before, after, STEP_ROWS))
        run.rows += deleted
    while True:
        failed = await run.step(store.fail_disabled(now, STEP_ROWS))
        run.rows += failed
        if failed < STEP_ROWS:
            return run
