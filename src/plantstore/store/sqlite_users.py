"""The SQLite store's users: reads on the reader connection, writes through the writer."""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

from .users import UserRecord

if TYPE_CHECKING:
    from .sqlite_writer import Writer

_USER_COLUMNS = "id, name, issuer, created_at, disabled_at"
_LIST_USERS = (
    "SELECT users.id, users.name, users.issuer, users.created_at, users.disabled_at, "
    "users.plant_count, (SELECT count(*) FROM tokens WHERE tokens.user_id = users.id "
    "AND tokens.revoked_at IS NULL AND (tokens.expires_at IS NULL OR tokens.expires_at > ?)) "
    "FROM users"
)


class SQLiteUsers:
    """Mixed into ``SQLiteStore``, which provides ``_read`` and ``writer``."""

    writer: Writer

    @property
    def _read(self) -> sqlite3.Connection:
        raise NotImplementedError

    async def find_user(self, issuer: str, name: str) -> UserRecord | None:
        row = self._read.execute(
            f"SELECT {_USER_COLUMNS} FROM users WHERE issuer = ? AND name = ?",  # noqa: S608 (constant columns)
            (issuer, name),
        ).fetchone()
        return None if row is None else UserRecord(*row)

    async def create_user(self, issuer: str, name: str) -> UserRecord:
        return await self.writer.submit(  # type: ignore[no-any-return]
            lambda conn: _create_user(conn, issuer, name)
        )

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
        condition = "disabled_at IS NULL" if disabled else "disabled_at IS NOT NULL"
        return await self.writer.submit(  # type: ignore[no-any-return]
            lambda conn: (
                conn.execute(
                    f"UPDATE users SET disabled_at = ? WHERE id = ? AND {condition}",  # noqa: S608 (constant condition)
                    (when, user_id),
                ).rowcount
                == 1
            ),
            one_write=True,
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
