"""Tokens and users on SQLite: reads on the database's reader connection, writes through its
group-commit writer (alone, so a row it reads back is the one it wrote)."""

from __future__ import annotations

import sqlite3
import time

from ..db.sqlite.database import SQLiteDatabase, unavailable_if_environment
from ..db.sqlite.ops import WriteOp
from .store import TokenRecord, UserRecord

TOKEN_COLUMNS = (
    "tokens.id, users.name, users.id, tokens.created_at, tokens.expires_at, "
    "tokens.last_used_at, tokens.revoked_at, tokens.label, users.disabled_at, users.max_plants"
)
_USER_COLUMNS = "id, name, issuer, created_at, disabled_at"
_LIST_USERS = (
    "SELECT users.id, users.name, users.issuer, users.created_at, users.disabled_at, "
    "users.plant_count, (SELECT count(*) FROM tokens WHERE tokens.user_id = users.id "
    "AND tokens.revoked_at IS NULL AND (tokens.expires_at IS NULL OR tokens.expires_at > ?)), "
    "users.sandbox_expires_at FROM users"
)


class SQLiteTokens:
    def __init__(self, database: SQLiteDatabase) -> None:
        self._database = database
        self.writer = database.writer

    @property
    def _read(self) -> sqlite3.Connection:
        return self._database.reader

    async def find_token(self, token_hash: str) -> TokenRecord | None:
        try:
            row = self._read.execute(
                f"SELECT {TOKEN_COLUMNS} FROM tokens JOIN users ON users.id = tokens.user_id "  # noqa: S608 (constant columns)
                "WHERE tokens.token_hash = ?",
                (token_hash,),
            ).fetchone()
        except sqlite3.Error as exc:
            raise unavailable_if_environment(exc) from exc
        return None if row is None else TokenRecord(*row)

    async def auth_generation(self) -> int:
        try:
            row = self._read.execute("SELECT value FROM auth_generation").fetchone()
        except sqlite3.Error as exc:
            raise unavailable_if_environment(exc) from exc
        return int(row[0])

    async def touch_token(self, token_id: int, when: float) -> None:
        self.writer.submit_nowait(TOUCH_TOKEN, when, token_id)

    async def create_token(
        self, user: str, token_hash: str, expires_at: float | None, label: str | None = None
    ) -> TokenRecord:
        return await self.writer.submit(CREATE_TOKEN, user, token_hash, expires_at, label)

    async def list_tokens(self, user: str | None) -> list[TokenRecord]:
        query = f"SELECT {TOKEN_COLUMNS} FROM tokens JOIN users ON users.id = tokens.user_id"  # noqa: S608 (constant columns)
        params: tuple[str, ...] = ()
        if user is not None:
            query += " WHERE users.issuer = '' AND users.name = ?"
            params = (user,)
        rows = self._read.execute(query + " ORDER BY tokens.id", params)
        return [TokenRecord(*row) for row in rows]

    async def revoke_token(self, token_id: int) -> bool:
        now = time.time()
        return await self.writer.submit(REVOKE_TOKEN, now, token_id)

    async def create_first_token(self, user: str, token_hash: str) -> TokenRecord | None:
        return await self.writer.submit(CREATE_FIRST_TOKEN, user, token_hash)

    async def find_user(self, issuer: str, name: str) -> UserRecord | None:
        row = self._read.execute(
            f"SELECT {_USER_COLUMNS} FROM users WHERE issuer = ? AND name = ?",  # noqa: S608 (constant columns)
            (issuer, name),
        ).fetchone()
        return None if row is None else UserRecord(*row)

    async def create_user(self, issuer: str, name: str) -> UserRecord:
        return await self.writer.submit(CREATE_USER, issuer, name)

    async def user_disabled_at(self, user_id: int) -> float | None:
        row = self._read.execute("SELECT disabled_at FROM users WHERE id = ?", (user_id,))
        found = row.fetchone()
        return None if found is None else found[0]

    async def list_users(self, issuer: str | None = None) -> list[UserRecord]:
        query = _LIST_USERS
        params: list[float | str] = [time.time()]
        if issuer is not None:
            query, params = f"{query} WHERE users.issuer = ?", [time.time(), issuer]
        rows = self._read.execute(f"{query} ORDER BY users.id", params)
        return [UserRecord(*row) for row in rows]

    async def set_user_disabled(self, user_id: int, disabled: bool) -> bool:
        when = time.time() if disabled else None
        return await self.writer.submit(SET_USER_DISABLED, user_id, when)


def _touch_token(conn: sqlite3.Connection, when: float, token_id: int) -> None:
    conn.execute("UPDATE tokens SET last_used_at = ? WHERE id = ?", (when, token_id))


def _revoke_token(conn: sqlite3.Connection, now: float, token_id: int) -> bool:
    revoke = "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"
    return conn.execute(revoke, (now, token_id)).rowcount == 1


def _create_first_token(conn: sqlite3.Connection, user: str, token_hash: str) -> TokenRecord | None:
    if conn.execute("SELECT 1 FROM tokens LIMIT 1").fetchone() is not None:
        return None
    return _create_token(conn, user, token_hash, None, None)


def _set_user_disabled(conn: sqlite3.Connection, user_id: int, when: float | None) -> bool:
    """Disable (``when`` a time) or enable (None) a user; whether it changed."""
    condition = "disabled_at IS NULL" if when is not None else "disabled_at IS NOT NULL"
    return (
        conn.execute(
            f"UPDATE users SET disabled_at = ? WHERE id = ? AND {condition}",  # noqa: S608 (constant condition)
            (when, user_id),
        ).rowcount
        == 1
    )


def _create_user(conn: sqlite3.Connection, issuer: str, name: str) -> UserRecord:
    """Insert unless present; the writer is alone, so the row read back is the one."""
    conn.execute(
        "INSERT INTO users (issuer, name, created_at) VALUES (?, ?, ?) "
        "ON CONFLICT (issuer, name) DO NOTHING",
        (issuer, name, time.time()),
    )
    row = conn.execute(
        f"SELECT {_USER_COLUMNS} FROM users WHERE issuer = ? AND name = ?",  # noqa: S608 (constant columns)
        (issuer, name),
    ).fetchone()
    return UserRecord(*row)


def _create_token(
    conn: sqlite3.Connection,
    user: str,
    token_hash: str,
    expires_at: float | None,
    label: str | None,
) -> TokenRecord:
    now = time.time()
    conn.execute(
        "INSERT INTO users (name, created_at) VALUES (?, ?) ON CONFLICT (issuer, name) DO NOTHING",
        (user, now),
    )
    (user_id,) = conn.execute(
        "SELECT id FROM users WHERE issuer = '' AND name = ?", (user,)
    ).fetchone()
    token_id = conn.execute(
        "INSERT INTO tokens (user_id, token_hash, created_at, expires_at, label) "
        "VALUES (?, ?, ?, ?, ?)",
        (user_id, token_hash, now, expires_at, label),
    ).lastrowid
    assert token_id is not None
    return TokenRecord(token_id, user, user_id, now, expires_at, None, None, label)


TOUCH_TOKEN = WriteOp(_touch_token)
CREATE_TOKEN = WriteOp(_create_token)
REVOKE_TOKEN = WriteOp(_revoke_token)
CREATE_FIRST_TOKEN = WriteOp(_create_first_token)
CREATE_USER = WriteOp(_create_user)
SET_USER_DISABLED = WriteOp(_set_user_disabled, one_write=True)
