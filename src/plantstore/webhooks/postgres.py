"""Webhook subscriptions and deliveries on PostgreSQL, over the plant store's pool.

Claims take rows with ``FOR UPDATE SKIP LOCKED``, so instances claiming at once split the
due deliveries between them; the claim is committed before any HTTP is sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import asyncpg

from . import sql
from .store import (
    AttemptResult,
    ClaimedDelivery,
    DeliveryRecord,
    SecretPair,
    Subscription,
)

Connect = Callable[[], AbstractAsyncContextManager[asyncpg.Connection]]
_N = sql.numbered
# The bounded steps that delete (or fail) a chunk chosen by a subquery, spelled so that the
# outer statement probes the primary key with the chosen ids. As ``id IN (SELECT … LIMIT ?)``
# the server's cached generic plan, which cannot see the limit, was a hash join over a scan
# of the whole table: every step of a prune read every attempt ever kept.
PRUNE_ATTEMPTS = (
    "DELETE FROM webhook_attempts WHERE id = ANY(ARRAY("
    "SELECT id FROM webhook_attempts WHERE attempted_at < $1 ORDER BY attempted_at LIMIT $2))"
)
FAIL_DUE_OF_DISABLED = (
    "UPDATE webhook_deliveries SET state = 2, last_error = $1, finished_at = $2 "
    "WHERE id = ANY(ARRAY(SELECT d.id FROM webhook_deliveries d "
    "JOIN webhook_subscriptions s ON s.id = d.subscription_id "
    "WHERE d.state = 0 AND NOT s.enabled LIMIT $3))"
)

_CLAIM = f"""
WITH due AS (
    SELECT d.id, d.subscription_id, d.next_attempt_at
    FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription_id
    WHERE d.state = 0 AND d.next_attempt_at <= $2 AND s.enabled
        AND d.subscription_id <> ALL($3::bigint[])
    ORDER BY d.next_attempt_at LIMIT $4
    FOR UPDATE OF d SKIP LOCKED
), ranked AS (
    SELECT id, row_number() OVER (
        PARTITION BY subscription_id ORDER BY next_attempt_at) AS rank
    FROM due
)
UPDATE webhook_deliveries d SET next_attempt_at = $1 FROM ranked
WHERE d.id = ranked.id AND ranked.rank <= $5
RETURNING {", ".join(f"d.{column.strip()}" for column in sql.CLAIMED_COLUMNS.split(","))}
"""  # noqa: S608 (constant columns)


class PostgresWebhookStore:
    def __init__(self, connection: Connect) -> None:
        self._connection = connection

    async def open(self) -> None:
        pass  # the plant store's pool is ours too

    async def close(self) -> None:
        pass

    async def _fetch(self, query: str, *args: object) -> list[Any]:
        async with self._connection() as connection:
            return list(await connection.fetch(_N(query), *args))

    async def _execute(self, query: str, *args: object) -> int:
        async with self._connection() as connection:
            status: str = await connection.execute(_N(query), *args)
        return _rowcount(status)

    async def create_subscription(
        self, user_id: int, url: str, events: int, secret: str, cap: int | None = None
    ) -> Subscription | None:
        """With ``cap``, the user's row is locked for the count and the insert, so racing
        creates (on any instance) queue and cannot pass it."""
        async with self._connection() as connection, connection.transaction():
            if cap is not None:
                await connection.execute(
                    "SELECT 1 FROM users WHERE id = $1 FOR NO KEY UPDATE", user_id
                )
                held = await connection.fetchval(
                    "SELECT count(*) FROM webhook_subscriptions WHERE user_id = $1", user_id
                )
                if held >= cap:
                    return None
            subscription_id = await connection.fetchval(
                "INSERT INTO webhook_subscriptions (user_id, url, events, secret, enabled, "
                "created_at) VALUES ($1, $2, $3, $4, true, $5) RETURNING id",
                user_id,
                url,
                events,
                secret,
                time.time(),
            )
        return await self.get_subscription(subscription_id)

    async def list_subscriptions(
        self, user_id: int | None = None, user: str | None = None
    ) -> list[Subscription]:
        if user_id is not None:
            rows = await self._fetch(
                f"{sql.SUBSCRIPTIONS} WHERE s.user_id = ? ORDER BY s.id", user_id
            )
        elif user is not None:
            rows = await self._fetch(f"{sql.SUBSCRIPTIONS} WHERE u.name = ? ORDER BY s.id", user)
        else:
            rows = await self._fetch(f"{sql.SUBSCRIPTIONS} ORDER BY s.id")
        return [Subscription(*row) for row in rows]

    async def get_subscription(self, subscription_id: int) -> Subscription | None:
        rows = await self._fetch(f"{sql.SUBSCRIPTIONS} WHERE s.id = ?", subscription_id)
        return Subscription(*rows[0]) if rows else None

    async def delete_subscription(self, user_id: int, subscription_id: int) -> bool:
        return await self._execute(sql.DELETE, user_id, subscription_id) == 1

    async def set_enabled(self, subscription_id: int, enabled: bool, reason: str | None) -> bool:
        async with self._connection() as connection, connection.transaction():
            status = await connection.execute(_N(sql.SET_ENABLED), enabled, reason, subscription_id)
            found = _rowcount(status) == 1
            if found and not enabled:
                await connection.execute(
                    _N(sql.FAIL_DUE_OF), sql.DISABLED_ERROR, time.time(), subscription_id
                )
        return found

    async def rotate_secret(self, subscription_id: int, secret: str, keep_old_until: float) -> bool:
        return await self._execute(sql.ROTATE, keep_old_until, secret, subscription_id) == 1

    async def list_deliveries(
        self, user_id: int, subscription_id: int, limit: int
    ) -> list[DeliveryRecord] | None:
        if not await self._fetch(sql.OWNS, subscription_id, user_id):
            return None
        rows = await self._fetch(sql.LIST_DELIVERIES, subscription_id, limit)
        return [DeliveryRecord(*row) for row in rows]

    async def redeliver(self, user_id: int, subscription_id: int, delivery_id: int) -> bool:
        args = (time.time(), delivery_id, subscription_id, user_id)
        return await self._execute(sql.REDELIVER, *args) == 1

    async def redeliver_failed(
        self, user_id: int, subscription_id: int, since: float
    ) -> int | None:
        if not await self._fetch(sql.OWNS, subscription_id, user_id):
            return None
        return await self._execute(sql.REDELIVER_FAILED, time.time(), subscription_id, since)

    async def any_due(self, now: float) -> bool:
        return bool(await self._fetch(sql.ANY_DUE, now))

    async def claim(
        self, now: float, limit: int, per_subscription: int, busy: list[int], lease: float
    ) -> list[ClaimedDelivery]:
        async with self._connection() as connection:
            rows = await connection.fetch(_CLAIM, now + lease, now, busy, limit, per_subscription)
            if not rows:
                return []
            targets = {
                row[0]: (row[1], SecretPair(row[2], row[3], row[4]))
                for row in await connection.fetch(
                    sql.SECRETS.format("SELECT unnest($1::bigint[])"),
                    sorted({row[1] for row in rows}),
                )
            }
        return [sql.claimed_delivery(row, targets) for row in rows]

    async def record(self, results: list[AttemptResult], now: float) -> None:
        rows = sql.RecordRows(results, now)
        async with self._connection() as connection, connection.transaction():
            for statement, params in rows.statements():
                if params:
                    await connection.executemany(_N(statement), params)
            for statement, row, subscription_id in rows.disables():
                if _rowcount(await connection.execute(_N(statement), *row)):
                    await connection.execute(
                        _N(sql.FAIL_DUE_OF), *rows.fail_due_of(subscription_id)
                    )

    async def prune_attempts(self, before: float, limit: int) -> int:
        return await self._execute(PRUNE_ATTEMPTS, before, limit)

    async def prune_deliveries(
        self, before: float, after_id: int, limit: int
    ) -> tuple[int, int | None]:
        async with self._connection() as connection:
            chunk = await connection.fetchrow(_N(sql.DELIVERY_CHUNK), after_id, limit)
            assert chunk is not None  # an aggregate: always one row
            last, oldest, count = chunk
            if not count:
                return 0, None
            status = await connection.execute(_N(sql.PRUNE_DELIVERIES), after_id, last, before)
        done = count < limit or oldest >= before
        return _rowcount(status), None if done else int(last)

    async def fail_disabled(self, now: float, limit: int) -> int:
        return await self._execute(FAIL_DUE_OF_DISABLED, sql.DISABLED_ERROR, now, limit)

    async def oldest_due(self) -> float | None:
        rows = await self._fetch(sql.OLDEST_DUE)
        return None if not rows or rows[0][0] is None else float(rows[0][0])


def _rowcount(status: str) -> int:
    return int(status.rsplit(" ", 1)[-1])
