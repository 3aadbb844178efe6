"""Sandbox users on SQLite: issuing one with its token, and purging expired ones in small steps.

Both are jobs for the machine's group-commit writer. A purge step deletes at most
``max_rows`` rows and is a background job (it joins a request's commit rather than adding
one), so a request's write waits for one step's statements at most, never for the whole
purge; the next step is submitted only after this one committed, so requests' writes
interleave with the purge.
"""

from __future__ import annotations

import sqlite3
import time

from ..auth.store import TokenRecord
from ..db.sqlite.database import SQLiteDatabase
from ..db.sqlite.ops import WriteOp
from .store import IssueBudget

_FORGET_ISSUES = (
    "DELETE FROM sandbox_issues WHERE id IN "
    "(SELECT id FROM sandbox_issues WHERE issued_at < ? LIMIT ?)"
)
USERS_PER_STEP = 64  # expired users a step looks at; their rows still count against max_rows


class SQLiteSandbox:
    def __init__(self, database: SQLiteDatabase) -> None:
        self._database = database
        self._writer = database.writer

    async def address_key(self) -> bytes:
        row = self._database.read(
            "SELECT value FROM secrets WHERE name = 'sandbox_address_key'"
        ).fetchone()
        return bytes.fromhex(row[0])

    async def issue_sandbox_user(
        self,
        name: str,
        token_hash: str,
        expires_at: float,
        max_plants: int,
        label: str,
        budget: IssueBudget | None,
    ) -> TokenRecord | float:
        return await self._writer.submit(
            ISSUE, name, token_hash, expires_at, max_plants, label, budget
        )

    async def forget_issues(self, before: float, max_rows: int) -> int:
        old = self._database.read(
            "SELECT 1 FROM sandbox_issues WHERE issued_at < ? LIMIT 1", (before,)
        ).fetchone()
        if old is None:
            return 0  # the common case costs the writer nothing
        return await self._writer.submit(FORGET_ISSUES, before, max_rows)

    async def purge_expired_users(self, before: float, max_rows: int) -> tuple[int, float]:
        if not any_expired(self._database.reader, before):
            return 0, 0.0  # the common case costs the writer nothing
        return await self._writer.submit(PURGE_STEP, before, max_rows)


def _issue(
    conn: sqlite3.Connection,
    name: str,
    token_hash: str,
    expires_at: float,
    max_plants: int,
    label: str,
    budget: IssueBudget | None,
) -> TokenRecord | float:
    """Spend the address's budget and issue, or the seconds until it may (the machine's one
    writer runs this: no other issue counts meanwhile)."""
    wait = spend(conn, budget) if budget is not None else 0.0
    if wait > 0:
        return wait
    return create_sandbox_user(conn, name, token_hash, expires_at, max_plants, label)


def _forget_issues(conn: sqlite3.Connection, before: float, max_rows: int) -> int:
    return conn.execute(_FORGET_ISSUES, (before, max_rows)).rowcount


def spend(conn: sqlite3.Connection, budget: IssueBudget) -> float:
    """Count the address's issues in the window; 0 and one more noted if another fits, else
    the seconds until the oldest leaves the window."""
    rows = conn.execute(
        "SELECT issued_at FROM sandbox_issues WHERE address_key = ? AND issued_at > ? "
        "ORDER BY issued_at LIMIT ?",
        (budget.address_key, budget.now - budget.window, budget.limit),
    ).fetchall()
    if len(rows) >= budget.limit:
        return max(0.001, float(rows[0][0]) + budget.window - budget.now)
    conn.execute(
        "INSERT INTO sandbox_issues (address_key, issued_at) VALUES (?, ?)",
        (budget.address_key, budget.now),
    )
    return 0.0


def create_sandbox_user(
    conn: sqlite3.Connection,
    name: str,
    token_hash: str,
    expires_at: float,
    max_plants: int,
    label: str,
) -> TokenRecord:
    """Insert a fresh user with its own quota and expiry, and its one token."""
    now = time.time()
    user_id = conn.execute(
        "INSERT INTO users (name, created_at, max_plants, sandbox_expires_at) VALUES (?, ?, ?, ?)",
        (name, now, max_plants, expires_at),
    ).lastrowid
    token_id = conn.execute(
        "INSERT INTO tokens (user_id, token_hash, created_at, expires_at, label) "
        "VALUES (?, ?, ?, ?, ?)",
        (user_id, token_hash, now, expires_at, label),
    ).lastrowid
    assert user_id is not None
    assert token_id is not None
    return TokenRecord(token_id, name, user_id, now, expires_at, None, None, label)


def any_expired(conn: sqlite3.Connection, before: float) -> bool:
    """Tell (on a read connection, without the writer) whether a purge has work to do."""
    row = conn.execute(
        "SELECT 1 FROM users WHERE sandbox_expires_at <= ? LIMIT 1", (before,)
    ).fetchone()
    return row is not None


def timed_purge_step(conn: sqlite3.Connection, before: float, max_rows: int) -> tuple[int, float]:
    """``purge_step``, and the seconds it held the writer (its commit is shared, not its)."""
    started = time.perf_counter()
    deleted = purge_step(conn, before, max_rows)
    return deleted, time.perf_counter() - started


def purge_step(conn: sqlite3.Connection, before: float, max_rows: int) -> int:
    """Delete up to ``max_rows`` rows of users whose sandbox expired before ``before``: their
    webhook subscriptions, their plants, then (once a user has none left) its tokens and the user row, whose deletion
    cascades to whatever else references it. Return the rows deleted; 0 means done."""
    users = conn.execute(
        "SELECT id FROM users WHERE sandbox_expires_at <= ? ORDER BY sandbox_expires_at LIMIT ?",
        (before, USERS_PER_STEP),
    ).fetchall()
    budget = max_rows
    for (user_id,) in users:
        # Subscriptions first (their deliveries and attempts cascade): the plants deleted
        # next must not queue plant.deleted events for a user that no longer exists.
        budget -= conn.execute(
            "DELETE FROM webhook_subscriptions WHERE user_id = ?", (user_id,)
        ).rowcount
        budget -= conn.execute(
            "DELETE FROM plants WHERE user_id = ? AND id IN "
            "(SELECT id FROM plants WHERE user_id = ? ORDER BY id LIMIT ?)",
            (user_id, user_id, budget),
        ).rowcount
        if budget < 2:  # the user may have plants left, and has a token and its row
            break  # the next step goes on with it
        budget -= conn.execute("DELETE FROM tokens WHERE user_id = ?", (user_id,)).rowcount
        budget -= conn.execute("DELETE FROM users WHERE id = ?", (user_id,)).rowcount
        if budget <= 0:
            break
    return max_rows - budget


ISSUE = WriteOp(_issue)
FORGET_ISSUES = WriteOp(_forget_issues, one_write=True, background=True)
PURGE_STEP = WriteOp(timed_purge_step, background=True)
