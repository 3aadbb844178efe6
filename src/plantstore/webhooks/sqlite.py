"""Webhook subscriptions and deliveries on SQLite: writes (claims and results included) go
through the machine's group-commit writer, so they share fsyncs with plant writes; reads run
on a connection of their own. No HTTP happens inside any of these jobs."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from ..db.sqlite.connection import connect
from ..db.sqlite.database import ProcessWriter
from ..db.sqlite.ops import WriteOp
from . import sql
from .store import (
    AttemptResult,
    ClaimedDelivery,
    DeliveryRecord,
    SecretPair,
    Subscription,
)

_CLAIM = f"""
UPDATE webhook_deliveries SET next_attempt_at = ?
WHERE id IN (
    SELECT id FROM (
        SELECT id, row_number() OVER (
            PARTITION BY subscription_id ORDER BY next_attempt_at) AS rank
        FROM (
            SELECT id, subscription_id, next_attempt_at
            FROM webhook_deliveries INDEXED BY webhook_deliveries_due
            WHERE state = 0 AND next_attempt_at <= ?
                AND +subscription_id IN (SELECT id FROM webhook_subscriptions WHERE enabled)
                AND +subscription_id NOT IN (SELECT value FROM json_each(?))
            ORDER BY next_attempt_at LIMIT ?
        )
    ) WHERE rank <= ?
)
RETURNING {sql.CLAIMED_COLUMNS}
"""  # noqa: S608 (constant columns)


# The due index, in its own order, stopping at the limit: a join here had SQLite sort every
# due row on each claim (a quarter of a loaded server's writer time with a backlog).
class SQLiteWebhookStore:
    def __init__(self, path: Path, writer: ProcessWriter, busy_timeout_ms: int) -> None:
        self._path = path
        self._writer = writer
        self._busy_timeout_ms = busy_timeout_ms
        self._reader: sqlite3.Connection | None = None

    async def open(self) -> None:
        self._reader = connect(self._path, self._busy_timeout_ms)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    @property
    def _read(self) -> sqlite3.Connection:
        if self._reader is None:
            raise RuntimeError("the webhook store is not open")
        return self._reader

    async def create_subscription(
        self, user_id: int, url: str, events: int, secret: str, cap: int | None = None
    ) -> Subscription | None:
        """The count and the insert are one job of the single writer, so racing creates
        cannot pass ``cap``."""
        row = (user_id, url, events, secret, time.time())
        subscription_id = await self._writer.submit(INSERT_SUBSCRIPTION, row, cap)
        if subscription_id is None:
            return None
        return await self.get_subscription(subscription_id)

    async def list_subscriptions(
        self, user_id: int | None = None, user: str | None = None
    ) -> list[Subscription]:
        if user_id is not None:
            rows = self._read.execute(
                f"{sql.SUBSCRIPTIONS} WHERE s.user_id = ? ORDER BY s.id", (user_id,)
            )
        elif user is not None:
            rows = self._read.execute(
                f"{sql.SUBSCRIPTIONS} WHERE u.name = ? ORDER BY s.id", (user,)
            )
        else:
            rows = self._read.execute(f"{sql.SUBSCRIPTIONS} ORDER BY s.id")
        return [_subscription(row) for row in rows]

    async def get_subscription(self, subscription_id: int) -> Subscription | None:
        row = self._read.execute(
            f"{sql.SUBSCRIPTIONS} WHERE s.id = ?", (subscription_id,)
        ).fetchone()
        return None if row is None else _subscription(row)

    async def delete_subscription(self, user_id: int, subscription_id: int) -> bool:
        rowcount = await self._writer.submit(ROWCOUNT, sql.DELETE, (user_id, subscription_id))
        return rowcount == 1

    async def set_enabled(self, subscription_id: int, enabled: bool, reason: str | None) -> bool:
        now = time.time()
        rowcount = await self._writer.submit(SET_ENABLED, subscription_id, enabled, reason, now)
        return rowcount == 1

    async def rotate_secret(self, subscription_id: int, secret: str, keep_old_until: float) -> bool:
        rowcount = await self._writer.submit(
            ROWCOUNT, sql.ROTATE, (keep_old_until, secret, subscription_id)
        )
        return rowcount == 1

    async def list_deliveries(
        self, user_id: int, subscription_id: int, limit: int
    ) -> list[DeliveryRecord] | None:
        if self._read.execute(sql.OWNS, (subscription_id, user_id)).fetchone() is None:
            return None
        rows = self._read.execute(sql.LIST_DELIVERIES, (subscription_id, limit))
        return [DeliveryRecord(*row) for row in rows]

    async def redeliver(self, user_id: int, subscription_id: int, delivery_id: int) -> bool:
        now = time.time()
        rowcount = await self._writer.submit(
            ROWCOUNT, sql.REDELIVER, (now, delivery_id, subscription_id, user_id)
        )
        return rowcount == 1

    async def redeliver_failed(
        self, user_id: int, subscription_id: int, since: float
    ) -> int | None:
        return await self._writer.submit(
            REDELIVER_FAILED, user_id, subscription_id, since, time.time()
        )

    async def any_due(self, now: float) -> bool:
        return self._read.execute(sql.ANY_DUE, (now,)).fetchone() is not None

    async def claim(
        self, now: float, limit: int, per_subscription: int, busy: list[int], lease: float
    ) -> list[ClaimedDelivery]:
        params = (now + lease, now, json.dumps(busy), limit, per_subscription)
        return await self._writer.submit(CLAIM, params)

    async def record(self, results: list[AttemptResult], now: float) -> None:
        rows = sql.RecordRows(results, now)
        disables = [
            (statement, row, rows.fail_due_of(subscription_id))
            for statement, row, subscription_id in rows.disables()
        ]
        await self._writer.submit(RECORD, rows.statements(), disables)

    async def prune_attempts(self, before: float, limit: int) -> int:
        return await self._writer.submit(ROWCOUNT, sql.PRUNE_ATTEMPTS, (before, limit))

    async def prune_deliveries(
        self, before: float, after_id: int, limit: int
    ) -> tuple[int, int | None]:
        return await self._writer.submit(PRUNE_DELIVERIES, before, after_id, limit)

    async def fail_disabled(self, now: float, limit: int) -> int:
        return await self._writer.submit(
            ROWCOUNT, sql.FAIL_DUE_OF_DISABLED, (sql.DISABLED_ERROR, now, limit)
        )

    async def oldest_due(self) -> float | None:
        row = self._read.execute(sql.OLDEST_DUE).fetchone()
        return None if row is None or row[0] is None else float(row[0])


# The writes, functions of the connection and plain values, declared as operations below so
# that a worker that does not own the machine's writer can send them to the one that does.


def _rowcount(conn: sqlite3.Connection, statement: str, params: tuple[Any, ...]) -> int:
    return conn.execute(statement, params).rowcount


def _insert_subscription(
    conn: sqlite3.Connection, row: tuple[int, str, int, str, float], cap: int | None
) -> int | None:
    """The count and the insert are one job of the single writer, so racing creates cannot
    pass ``cap``."""
    if cap is not None:
        (held,) = conn.execute(
            "SELECT count(*) FROM webhook_subscriptions WHERE user_id = ?", (row[0],)
        ).fetchone()
        if held >= cap:
            return None
    cursor = conn.execute(
        "INSERT INTO webhook_subscriptions (user_id, url, events, secret, enabled, "
        "created_at) VALUES (?, ?, ?, ?, 1, ?)",
        row,
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def _set_enabled(
    conn: sqlite3.Connection, subscription_id: int, enabled: bool, reason: str | None, now: float
) -> int:
    rowcount = conn.execute(sql.SET_ENABLED, (enabled, reason, subscription_id)).rowcount
    if rowcount == 1 and not enabled:
        conn.execute(sql.FAIL_DUE_OF, (sql.DISABLED_ERROR, now, subscription_id))
    return rowcount


def _redeliver_failed(
    conn: sqlite3.Connection, user_id: int, subscription_id: int, since: float, now: float
) -> int | None:
    if conn.execute(sql.OWNS, (subscription_id, user_id)).fetchone() is None:
        return None
    return conn.execute(sql.REDELIVER_FAILED, (now, subscription_id, since)).rowcount


def _claim(conn: sqlite3.Connection, params: tuple[Any, ...]) -> list[ClaimedDelivery]:
    rows = conn.execute(_CLAIM, params).fetchall()
    if not rows:
        return []
    ids = sorted({row[1] for row in rows})
    marks = ",".join("?" * len(ids))
    targets = {
        row[0]: (row[1], SecretPair(row[2], row[3], row[4]))
        for row in conn.execute(sql.SECRETS.format(marks), ids)
    }
    return [sql.claimed_delivery(row, targets) for row in rows]


def _record(
    conn: sqlite3.Connection,
    statements: list[tuple[str, list[Any]]],
    disables: list[tuple[str, Any, Any]],
) -> None:
    for statement, params in statements:
        if params:
            conn.executemany(statement, params)
    for statement, row, fail_due in disables:
        if conn.execute(statement, row).rowcount:
            conn.execute(sql.FAIL_DUE_OF, fail_due)


def _prune_deliveries(
    conn: sqlite3.Connection, before: float, after_id: int, limit: int
) -> tuple[int, int | None]:
    last, oldest, count = conn.execute(sql.DELIVERY_CHUNK, (after_id, limit)).fetchone()
    if not count:
        return 0, None
    deleted = conn.execute(sql.PRUNE_DELIVERIES, (after_id, last, before)).rowcount
    done = count < limit or oldest >= before
    return deleted, None if done else int(last)


ROWCOUNT = WriteOp(_rowcount)
INSERT_SUBSCRIPTION = WriteOp(_insert_subscription)
SET_ENABLED = WriteOp(_set_enabled)
REDELIVER_FAILED = WriteOp(_redeliver_failed)
CLAIM = WriteOp(_claim)
RECORD = WriteOp(_record)
PRUNE_DELIVERIES = WriteOp(_prune_deliveries)


def _subscription(row: Any) -> Subscription:
    values = list(row)
    values[5] = bool(values[5])  # SQLite's 0 or 1
    return Subscription(*values)
