"""The PostgreSQL store's users: one statement each, race-safe across instances; and the
token row that both ways of making a user with a token (the operator's, the sandbox's) end with."""

from __future__ import annotations

import time
from contextlib import AbstractAsyncContextManager
from typing import Any

import asyncpg

from .base import TokenRecord
from .users import UserRecord

_USER_COLUMNS = "id, name, issuer, created_at, disabled_at"
# An upsert that touches nothing real, so that RETURNING yields the row whether this
# statement inserted it or a racing one (in this instance or another) did.
_CREATE_USER = f"""
INSERT INTO users (issuer, name, created_at) VALUES ($1, $2, $3)
ON CONFLICT (issuer, name) DO UPDATE SET issuer = EXCLUDED.issuer
RETURNING {_USER_COLUMNS}
"""  # noqa: S608 (constant columns)
_LIST_USERS = """
SELECT users.id, users.name, users.issuer, users.created_at, users.disabled_at,
       users.plant_count,
       (SELECT count(*) FROM tokens WHERE tokens.user_id = users.id
        AND tokens.revoked_at IS NULL AND (tokens.expires_at IS NULL OR tokens.expires_at > $1))
FROM users
"""

Connect = AbstractAsyncContextManager[asyncpg.pool.PoolConnectionProxy]


async def insert_token(
    connection: Any,
    user_id: int,
    user: str,
    token_hash: str,
    now: float,
    expires_at: float | None,
    label: str | None,
) -> TokenRecord:
    """Insert a token of ``user_id`` (in the caller's transaction) and return its record."""
    token_id = await connection.fetchval(
        "INSERT INTO tokens (user_id, token_hash, created_at, expires_at, label) "
        "VALUES ($1, $2, $3, $4, $5) RETURNING id",
        user_id,
        token_hash,
        now,
        expires_at,
        label,
    )
    return TokenRecord(token_id, user, user_id, now, expires_at, None, None, label)


class PostgresUsers:
    """Mixed into ``PostgresStore``, which provides ``_connection``."""

    def _connection(self) -> Connect:
        raise NotImplementedError

    async def find_user(self, issuer: str, name: str) -> UserRecord | None:
        async with self._connection() as connection:
            row = await connection.fetchrow(
                f"SELECT {_USER_COLUMNS} FROM users WHERE issuer = $1 AND name = $2",  # noqa: S608 (constant columns)
                issuer,
                name,
            )
        return None if row is None else UserRecord(*row)

    async def create_user(self, issuer: str, name: str) -> UserRecord:
        async with self._connection() as connection:
            row = await connection.fetchrow(_CREATE_USER, issuer, name, time.time())
        assert row is not None  # an upsert with RETURNING always yields its row
        return UserRecord(*row)

    async def user_disabled_at(self, user_id: int) -> float | None:
        async with self._connection() as connection:
            return await connection.fetchval(  # type: ignore[no-any-return]
                "SELECT disabled_at FROM users WHERE id = $1", user_id
            )

    async def list_users(self, issuer: str | None = None) -> list[UserRecord]:
        async with self._connection() as connection:
            if issuer is None:
                rows = await connection.fetch(f"{_LIST_USERS} ORDER BY users.id", time.time())
            else:
                rows = await connection.fetch(
                    f"{_LIST_USERS} WHERE users.issuer = $2 ORDER BY users.id", time.time(), issuer
                )
        return [UserRecord(*row) for row in rows]

    async def set_user_disabled(self, user_id: int, disabled: bool) -> bool:
        condition = "disabled_at IS NULL" if disabled else "disabled_at IS NOT NULL"
        async with self._connection() as connection:
            status = await connection.execute(
                f"UPDATE users SET disabled_at = $2 WHERE id = $1 AND {condition}",  # noqa: S608 (constant condition)
                user_id,
                time.time() if disabled else None,
            )
        return status == "UPDATE 1"
