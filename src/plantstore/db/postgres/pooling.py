"""What the service's PostgreSQL sessions need from the server, and where it is kept.

Straight to PostgreSQL, each connection asks in its startup packet for a statement timeout and
for ``synchronous_commit = on`` whatever the database's default. The server's timeout is twice
the service's own: the service gives up on a statement first (a 503, and asyncpg cancels it),
because a commit that the server's timeout ends while it waits for a synchronous standby is
reported as made (with a warning) though only the primary has it. A pooler such as PgBouncer
refuses startup parameters it does not know (or, told to ignore them, drops them) and lends a
client any of its server connections: behind one (``PLANTSTORE_POSTGRES_POOLING`` ``session``
or ``transaction``) the server itself must hold both for the service's role, and the start
checks that it does, or refuses with one line that says what to run. The per-user quota never
rests on the session: each create sets it for its own transaction. In ``transaction`` pooling
a prepared statement does not outlive its transaction's server connection, so asyncpg's
statement cache is off there (each statement prepared unnamed, on each use: two round trips a
statement) unless the pooler keeps prepared statements itself (PgBouncer 1.21 and later with
``max_prepared_statements``: ``PLANTSTORE_POSTGRES_POOLER_KEEPS_PREPARED``), which the start
checks.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import asyncpg

from ..failures import StoreOpenError

Pooling = Literal["none", "session", "transaction"]
SAFE_COMMITS = frozenset({"on", "remote_apply"})  # a commit answered once it is flushed

log = logging.getLogger(__name__)


def startup_settings(pooling: Pooling, statement_timeout: float, durable: bool) -> dict[str, str]:
    """The settings a connection asks for when it starts (all a pooler lets through)."""
    settings = {"application_name": "plantstore"}
    if pooling == "none":
        settings["statement_timeout"] = str(server_timeout_ms(statement_timeout))
        if durable:
            settings["synchronous_commit"] = "on"  # whatever the database's default is
    return settings


def statement_cache_size(pooling: Pooling, pooler_keeps_prepared: bool) -> int:
    """asyncpg's cache of named prepared statements: none where they cannot outlive a
    transaction."""
    return 0 if pooling == "transaction" and not pooler_keeps_prepared else 100


async def check_prepared_kept(first: Any, second: Any) -> None:
    """Refuse a transaction pooler said to keep prepared statements that drops them.

    ``first`` caches its statements, ``second`` holds a transaction open. A statement that
    ``first`` prepared on a server connection is run again while ``second`` holds that very
    server connection (a pooler lends the one it got back last), so it must run on another:
    a pooler that keeps prepared statements prepares it there, one that does not fails it.
    Where ``second`` got another server connection nothing is proven, and nothing refused.
    """
    probe = "SELECT pg_backend_pid()"
    backend = await first.fetchval(probe)
    async with second.transaction():
        if await second.fetchval(probe) != backend:
            return
        try:
            await first.fetchval(probe)
        except asyncpg.InvalidSQLStatementNameError:
            raise StoreOpenError(
                "the transaction pooler does not keep prepared statements (PgBouncer keeps "
                "them from 1.21 with max_prepared_statements > 0); set "
                "PLANTSTORE_POSTGRES_POOLER_KEEPS_PREPARED=false"
            ) from None


async def check_held(
    connection: Any, pooling: Pooling, statement_timeout: float, allow_unsafe: bool
) -> None:
    """Behind a pooler, refuse a server that does not hold the service's settings itself."""
    if pooling == "none":
        return
    timeout_ms, synchronous_commit, role, database = await connection.fetchrow(
        "SELECT (SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout'),"
        " current_setting('synchronous_commit'), current_user, current_database()"
    )
    missing = []
    if not _milliseconds(statement_timeout) < timeout_ms:  # 0 is none
        missing.append(f"statement_timeout = '{server_timeout_ms(statement_timeout)}ms'")
    if synchronous_commit not in SAFE_COMMITS:
        if allow_unsafe:
            log.warning(
                "PostgreSQL's synchronous_commit is %s behind the pooler "
                "(allowed by PLANTSTORE_ALLOW_UNSAFE_DURABILITY)",
                synchronous_commit,
            )
        else:
            missing.append("synchronous_commit = on")
    if missing:
        where = f'ROLE "{role}" IN DATABASE "{database}"'
        raise StoreOpenError(
            f"behind a {pooling} pooler PostgreSQL must hold the service's settings itself "
            f"(it has statement_timeout {timeout_ms}ms, synchronous_commit {synchronous_commit});"
            f" run {'; '.join(f'ALTER {where} SET {each}' for each in missing)}; then let the "
            "pooler reconnect (PgBouncer: RECONNECT)"
        )


def server_timeout_ms(statement_timeout: float) -> int:
    """The server's statement timeout: past the service's own, which must fire first."""
    return 2 * _milliseconds(statement_timeout)


def _milliseconds(seconds: float) -> int:
    return max(1, int(seconds * 1000))
