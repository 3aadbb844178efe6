"""Sandbox users on PostgreSQL: issuing one with its token, and purging expired ones in steps.

A purge step is one short transaction that locks a few expired users ``FOR UPDATE SKIP
LOCKED``, so any number of instances purge side by side, each taking users the others are
not on, and no request of another user ever waits on its locks. It deletes at most
``max_rows`` plants; a user with none left loses its tokens and its row (which cascades to
whatever else references it) in the same transaction.
"""

from __future__ import annotations

import time
from typing import Any

from ..auth.postgres import insert_token
from ..auth.store import TokenRecord
from ..db.postgres.pool import PostgresDatabase
from .store import IssueBudget

_FORGET_ISSUES = (
    "DELETE FROM sandbox_issues WHERE id IN "
    "(SELECT id FROM sandbox_issues WHERE issued_at < $1 LIMIT $2)"
)
USERS_PER_STEP = 64

_LOCK_EXPIRED = (
    "SELECT id FROM users WHERE sandbox_expires_at <= $1 "
    "ORDER BY sandbox_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED"
)
_DELETE_PLANTS = """
DELETE FROM plants USING (
    SELECT user_id, id FROM plants WHERE user_id = ANY($1::bigint[]) LIMIT $2
) AS doomed
WHERE plants.user_id = doomed.user_id AND plants.id = doomed.id
"""
_EMPTY_USERS = (
    "SELECT id FROM unnest($1::bigint[]) AS ids (id) "
    "WHERE NOT EXISTS (SELECT 1 FROM plants WHERE plants.user_id = ids.id) LIMIT $2"
)


class PostgresSandbox:
    def __init__(self, database: PostgresDatabase) -> None:
        self._connection = database.connection

    async def address_key(self) -> bytes:
        async with self._connection() as connection:
            value = await connection.fetchval(
                "SELECT value FROM secrets WHERE name = 'sandbox_address_key'"
            )
        return bytes.fromhex(value)

    async def issue_sandbox_user(
        self,
        name: str,
        token_hash: str,
        expires_at: float,
        max_plants: int,
        label: str,
        budget: IssueBudget | None,
    ) -> TokenRecord | float:
        async with self._connection() as connection, connection.transaction():
            if budget is not None and (wait := await spend(connection, budget)) > 0:
                return wait
            return await create_sandbox_user(
                connection, name, token_hash, expires_at, max_plants, label
            )

    async def forget_issues(self, before: float, max_rows: int) -> int:
        async with self._connection() as connection:
            return _count(await connection.execute(_FORGET_ISSUES, before, max_rows))

    async def purge_expired_users(self, before: float, max_rows: int) -> tuple[int, float]:
        async with self._connection() as connection:
            started = time.perf_counter()
            deleted = await purge_step(connection, before, max_rows)
            return deleted, time.perf_counter() - started


async def spend(connection: Any, budget: IssueBudget) -> float:
    """As SQLite's ``spend``, in the caller's transaction, under a lock on the address's key
    that instances counting the same address take in turns (held until the commit)."""
    await connection.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", budget.address_key
    )
    rows = await connection.fetch(
        "SELECT issued_at FROM sandbox_issues WHERE address_key = $1 AND issued_at > $2 "
        "ORDER BY issued_at LIMIT $3",
        budget.address_key,
        budget.now - budget.window,
        budget.limit,
    )
    if len(rows) >= budget.limit:
        return max(0.001, float(rows[0][0]) + budget.window - budget.now)
    await connection.execute(
        "INSERT INTO sandbox_issues (address_key, issued_at) VALUES ($1, $2)",
        budget.address_key,
        budget.now,
    )
    return 0.0


async def create_sandbox_user(
    connection: Any, name: str, token_hash: str, expires_at: float, max_plants: int, label: str
) -> TokenRecord:
    """Insert a fresh user with its own quota and expiry, and its one token (in the caller's
    transaction)."""
    now = time.time()
    user_id = await connection.fetchval(
        "INSERT INTO users (name, created_at, max_plants, sandbox_expires_at) "
        "VALUES ($1, $2, $3, $4) RETURNING id",
        name,
        now,
        max_plants,
        expires_at,
    )
    return await insert_token(connection, user_id, name, token_hash, now, expires_at, label)


async def purge_step(connection: Any, before: float, max_rows: int) -> int:
    """One bounded step of the purge; return the rows deleted (0: nothing left to take)."""
    async with connection.transaction():
        users = [row[0] for row in await connection.fetch(_LOCK_EXPIRED, before, USERS_PER_STEP)]
        if not users:
            return 0
        # Subscriptions first (their deliveries and attempts cascade): the plants deleted
        # next must not queue plant.deleted events for users that are going away.
        deleted = _count(
            await connection.execute(
                "DELETE FROM webhook_subscriptions WHERE user_id = ANY($1::bigint[])", users
            )
        )
        deleted += _count(
            await connection.execute(_DELETE_PLANTS, users, max(0, max_rows - deleted))
        )
        # What is left of the step's rows goes to users with no plant left: two rows each
        # (a sandbox user has one token), cascades aside.
        room = (max_rows - deleted) // 2
        empty = (
            [row[0] for row in await connection.fetch(_EMPTY_USERS, users, room)] if room else []
        )
        if empty:
            deleted += _count(
                await connection.execute(
                    "DELETE FROM tokens WHERE user_id = ANY($1::bigint[])", empty
                )
            )
            deleted += _count(
                await connection.execute("DELETE FROM users WHERE id = ANY($1::bigint[])", empty)
            )
    return deleted


def _count(status: str) -> int:
    """The row count of a command tag such as ``DELETE 12``."""
    return int(status.rsplit(" ", 1)[-1])
