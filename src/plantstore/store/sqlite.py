"""SQLite store: reads on the caller's own connection, writes through the group-commit writer.

WAL lets reads run beside the writer, so a read never waits for a commit. Reads are short
indexed lookups, so they run inline on the event loop rather than paying a thread hop.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import StoreUnavailable
from . import sandbox_sqlite
from .base import CreateOutcome, PlantRecord, TokenRecord
from .sqlite_lock import is_busy
from .sqlite_users import SQLiteUsers
from .sqlite_writer import Writer, connect

_TOKEN_COLUMNS = (
    "tokens.id, users.name, users.id, tokens.created_at, tokens.expires_at, "
    "tokens.last_used_at, tokens.revoked_at, tokens.label, users.disabled_at"
)


class SQLiteStore(SQLiteUsers):
    """The embedded default backend; every worker process has one, on the same file."""

    def __init__(
        self,
        path: Path,
        *,
        group_commit: bool = True,
        max_batch: int = 512,
        busy_timeout_ms: int = 5_000,
        max_plants_per_user: int | None = None,
        on_commit: Callable[[int], None] | None = None,
        on_lock_wait: Callable[[float, bool], None] | None = None,
    ) -> None:
        self.path = path
        self._max_plants = max_plants_per_user
        self._busy_timeout_ms = busy_timeout_ms
        self.writer = Writer(
            path,
            group_commit=group_commit,
            max_batch=max_batch,
            busy_timeout_ms=busy_timeout_ms,
            on_commit=on_commit,
            on_lock_wait=on_lock_wait,
        )
        self._reader: sqlite3.Connection | None = None

    async def open(self) -> None:
        self._reader = connect(self.path, self._busy_timeout_ms)
        self.writer.start()

    async def close(self) -> None:
        if self.writer.alive:
            self.writer.stop()
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    @property
    def _read(self) -> sqlite3.Connection:
        if self._reader is None:
            raise RuntimeError("the store is not open")
        return self._reader

    async def ping(self) -> None:
        self._read.execute("SELECT 1 FROM secrets LIMIT 1").fetchone()
        if not self.writer.alive:
            raise RuntimeError("the SQLite writer thread has stopped")

    async def cursor_key(self) -> bytes:
        row = self._read.execute("SELECT value FROM secrets WHERE name = 'cursor_key'").fetchone()
        return bytes.fromhex(row[0])

    async def create_plant(self, user_id: int, plant: PlantRecord) -> CreateOutcome:
        return await self.writer.submit(  # type: ignore[no-any-return]
            lambda conn: _create_plant(conn, user_id, plant, self._max_plants), one_write=True
        )

    async def list_plants(
        self, user_id: int, after_id: int | None, limit: int
    ) -> list[PlantRecord]:
        try:
            if after_id is None:
                rows = self._read.execute(
                    "SELECT id, name, tag FROM plants WHERE user_id = ? ORDER BY id LIMIT ?",
                    (user_id, limit),
                )
            else:
                rows = self._read.execute(
                    "SELECT id, name, tag FROM plants WHERE user_id = ? AND id > ? "
                    "ORDER BY id LIMIT ?",
                    (user_id, after_id, limit),
                )
            return [PlantRecord(*row) for row in rows]
        except sqlite3.OperationalError as exc:
            raise _unavailable_if_busy(exc) from exc

    async def delete_plant(self, user_id: int, plant_id: int) -> bool:
        return await self.writer.submit(  # type: ignore[no-any-return]
            lambda conn: (
                conn.execute(
                    "DELETE FROM plants WHERE user_id = ? AND id = ?", (user_id, plant_id)
                ).rowcount
                == 1
            ),
            one_write=True,
        )

    async def find_token(self, token_hash: str) -> TokenRecord | None:
        try:
            row = self._read.execute(
                f"SELECT {_TOKEN_COLUMNS} FROM tokens JOIN users ON users.id = tokens.user_id "  # noqa: S608 (constant columns)
                "WHERE tokens.token_hash = ?",
                (token_hash,),
            ).fetchone()
        except sqlite3.OperationalError as exc:
            raise _unavailable_if_busy(exc) from exc
        return None if row is None else TokenRecord(*row)

    async def touch_token(self, token_id: int, when: float) -> None:
        self.writer.submit_nowait(
            lambda conn: conn.execute(
                "UPDATE tokens SET last_used_at = ? WHERE id = ?", (when, token_id)
            )
        )

    async def create_token(
        self, user: str, token_hash: str, expires_at: float | None, label: str | None = None
    ) -> TokenRecord:
        return await self.writer.submit(  # type: ignore[no-any-return]
            lambda conn: _create_token(conn, user, token_hash, expires_at, label)
        )

    async def list_tokens(self, user: str | None) -> list[TokenRecord]:
        query = f"SELECT {_TOKEN_COLUMNS} FROM tokens JOIN users ON users.id = tokens.user_id"  # noqa: S608 (constant columns)
        params: tuple[str, ...] = ()
        if user is not None:
            query += " WHERE users.issuer = '' AND users.name = ?"
            params = (user,)
        rows = self._read.execute(query + " ORDER BY tokens.id", params)
        return [TokenRecord(*row) for row in rows]

    async def revoke_token(self, token_id: int) -> bool:
        now = time.time()
        return await self.writer.submit(  # type: ignore[no-any-return]
            lambda conn: (
                conn.execute(
                    "UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                    (now, token_id),
                ).rowcount
                == 1
            )
        )

    async def create_first_token(self, user: str, token_hash: str) -> TokenRecord | None:
        def create_if_none(conn: sqlite3.Connection) -> TokenRecord | None:
            if conn.execute("SELECT 1 FROM tokens LIMIT 1").fetchone() is not None:
                return None
            return _create_token(conn, user, token_hash, None, None)

        return await self.writer.submit(create_if_none)  # type: ignore[no-any-return]

    async def create_sandbox_user(
        self, name: str, token_hash: str, expires_at: float, max_plants: int, label: str
    ) -> TokenRecord:
        return await self.writer.submit(  # type: ignore[no-any-return]
            lambda conn: sandbox_sqlite.create_sandbox_user(
                conn, name, token_hash, expires_at, max_plants, label
            )
        )

    async def purge_expired_users(self, before: float, max_rows: int) -> tuple[int, float]:
        if not sandbox_sqlite.any_expired(self._read, before):
            return 0, 0.0  # the common case costs the writer nothing
        return await self.writer.submit(  # type: ignore[no-any-return]
            lambda conn: sandbox_sqlite.timed_purge_step(conn, before, max_rows), background=True
        )


def _unavailable_if_busy(exc: sqlite3.OperationalError) -> Exception:
    """A read that waited out the busy timeout (rare in WAL: recovery, a checkpoint's reset)
    is a 503 like a write's; any other failure stays what it is."""
    return StoreUnavailable("the database is busy; retry shortly") if is_busy(exc) else exc


def _create_plant(
    conn: sqlite3.Connection, user_id: int, plant: PlantRecord, max_plants: int | None
) -> CreateOutcome:
    """Insert unless the plant exists or the user is at the quota (the writer is alone, so
    the count it reads cannot change before the insert)."""
    held, own_quota = _plant_count(conn, user_id)
    quota = max_plants if own_quota is None else own_quota
    if quota is None or held < quota:
        inserted = conn.execute(
            "INSERT INTO plants (user_id, id, name, tag) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (user_id, id) DO NOTHING",
            (user_id, plant.plant_id, plant.name, plant.tag),
        ).rowcount
        if inserted == 1:
            return CreateOutcome.CREATED
    existing = conn.execute(
        "SELECT name, tag FROM plants WHERE user_id = ? AND id = ?", (user_id, plant.plant_id)
    ).fetchone()
    if existing is None:
        return CreateOutcome.OVER_QUOTA
    name, tag = existing
    same = name == plant.name and tag == plant.tag
    return CreateOutcome.UNCHANGED if same else CreateOutcome.CONFLICT


def _plant_count(conn: sqlite3.Connection, user_id: int) -> tuple[int, int | None]:
    """The user's plants, and its own quota (None: the global one applies)."""
    row = conn.execute(
        "SELECT plant_count, max_plants FROM users WHERE id = ?", (user_id,)
    ).fetchone()
    return (0, None) if row is None else (int(row[0]), row[1])


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
