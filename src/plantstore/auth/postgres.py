"""Tokens and users on PostgreSQL, over the database's pool: one statement each (or one
short transaction), race-safe across instances."""

from __future__ import annotations

import time
from typing import Any

import asyncpg

from ..db.postgres.pool import PostgresDatabase
from ..errors import StoreUnavailable
from .store import TokenRecord, UserRecord

_FIRST_TOKEN_LOCK = 0x706C616E7474  # advisory-lock key for "issue the first token once"
_TOKEN_COLUMNS = (
    "tokens.id, users.name, users.id, tokens.created_at, tokens.expires_at, "
    "tokens.last_used_at, tokens.revoked_at, tokens.label, users.disabled_at, users.max_plants"
)
_FIND_TOKEN = (
    f"SELECT {_TOKEN_COLUMNS} FROM tokens JOIN users ON users.id = tokens.user_id "  # noqa: S608 (constant columns)
    "WHERE tokens.token_hash = $1"
)
_LIST_TOKENS = f"SELECT {_TOKEN_COLUMNS} FROM tokens JOIN users ON users.id = tokens.user_id"  # noqa: S608 (constant columns)
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
        AND tokens.revoked_at IS NULL AND (tokens.expires_at IS NULL OR tokens.expires_at > $1)),
       users.sandbox_expires_at
FROM users
"""


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


class PostgresTokens:
    def __init__(self, database: PostgresDatabase) -> None:
        self._database = database
        self._connection = database.connection

    async def find_token(self, token_hash: str) -> TokenRecord | None:
        async with self._connection() as connection:
            row = await connection.fetchrow(_FIND_TOKEN, token_hash)
        return None if row is None else TokenRecord(*row)

    async def auth_generation(self) -> int:
        async with self._database.connection() as connection:
            return int(await connection.fetchval("SELECT value FROM auth_generation"))

    async def touch_token(self, token_id: int, when: float) -> None:
        self._database.spawn(self._touch(token_id, when))

    async def _touch(self, token_id: int, when: float) -> None:
        try:
            async with self._connection() as connection:
                await connection.execute(
                    "UPDATE tokens SET last_used_at = $2 WHERE id = $1", token_id, when
                )
        except StoreUnavailable:
            pass  # 'last used' is best effort; the request itself was served

    async def create_token(
        self, user: str, token_hash: str, expires_at: float | None, label: str | None = None
    ) -> TokenRecord:
        async with self._connection() as connection, connection.transaction():
            return await _insert_token(connection, user, token_hash, expires_at, label)

    async def create_first_token(self, user: str, token_hash: str) -> TokenRecord | None:
        async with self._connection() as connection, connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock($1)", _FIRST_TOKEN_LOCK)
            if await connection.fetchval("SELECT 1 FROM tokens LIMIT 1") is not None:
                return None
            return await _insert_token(connection, user, token_hash, None, None)

    async def list_tokens(self, user: str | None) -> list[TokenRecord]:
        async with self._connection() as connection:
            if user is None:
                rows = await connection.fetch(f"{_LIST_TOKENS} ORDER BY tokens.id")
            else:
                rows = await connection.fetch(
                    f"{_LIST_TOKENS} WHERE users.issuer = '' AND users.name = $1 ORDER BY tokens.id",
                    user,
                )
        return [TokenRecord(*row) for row in rows]

    async def revoke_token(self, token_id: int) -> bool:
        async with self._connection() as connection:
            status = await connection.execute(
                "UPDATE tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
                token_id,
                time.time(),
            )
        return status == "UPDATE 1"

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
            disabled_at: float | None = await connection.fetchval(
                "SELECT disabled_at FROM users WHERE id = $1", user_id
            )
        return disabled_at

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


async def _insert_token(
    connection: asyncpg.Connection,
    user: str,
    token_hash: str,
    expires_at: float | None,
    label: str | None,
) -> TokenRecord:
    """Insert the user if new, then the token; the caller holds a transaction."""
    now = time.time()
    await connection.execute(
        "INSERT INTO users (name, created_at) VALUES ($1, $2) ON CONFLICT (issuer, name) DO NOTHING",
        user,
        now,
    )
    user_id = await connection.fetchval(
        "SELECT id FROM users WHERE issuer = '' AND name = $1", user
    )
    return await insert_token(connection, user_id, user, token_hash, now, expires_at, label)
