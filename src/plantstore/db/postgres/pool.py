"""PostgreSQL's connection pool as the features' stores share it: asyncpg, plain SQL.

Every statement runs in autocommit (or one short transaction) and PostgreSQL flushes its
WAL before answering the commit, so an acknowledged write is on disk; a server that would
not (``fsync`` or ``synchronous_commit`` off) is refused at start unless allowed.

While the database is unreachable every call fails within ``connect_timeout +
statement_timeout`` with ``StoreUnavailable`` (503), never a hang; the pool reconnects by
itself once the database is back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from ...errors import StoreUnavailable
from ..failures import StoreOpenError, describe_failure

log = logging.getLogger(__name__)

_OUTAGE_SQLSTATE_CLASSES = frozenset({"08", "53", "57"})  # connection, resources, shutdown
_READ_ONLY_SQLSTATE = "25006"  # a standby that has not been promoted yet


def is_outage(exc: BaseException) -> bool:
    """Tell whether ``exc`` means the database cannot serve now, as opposed to a bug."""
    if isinstance(exc, OSError | TimeoutError | asyncpg.InterfaceError):
        return True
    if isinstance(exc, asyncpg.TargetServerAttributeNotMatched):
        return True  # every host answered, none accepts writes yet (before a promotion)
    if isinstance(exc, asyncpg.PostgresError):
        sqlstate = str(exc.sqlstate or "")
        return sqlstate[:2] in _OUTAGE_SQLSTATE_CLASSES or sqlstate == _READ_ONLY_SQLSTATE
    return False


async def _keep_session(connection: asyncpg.Connection) -> None:
    """Reset nothing when a connection goes back to the pool (asyncpg still rolls back an
    open transaction): our sessions hold no LISTEN, cursor, SET or session lock to undo,
    and the default reset query would be a second round trip on every request."""


class _OutageLog:
    """One warning per interval while the database is away, not one per refused request."""

    def __init__(self, interval: float = 5.0) -> None:
        self._interval = interval
        self._last = -interval
        self._refused = 0

    def note(self, exc: BaseException) -> None:
        self._refused += 1
        now = time.monotonic()
        if now - self._last >= self._interval:
            log.warning(
                "database unavailable (%d requests answered 503 in the last %.0f s): %s",
                self._refused,
                min(now - self._last, self._interval),
                describe_failure(exc),
            )
            self._last, self._refused = now, 0


class PostgresDatabase:
    """The shared backend: any number of processes and instances may use one database."""

    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int = 10,
        connect_timeout: float = 1.0,
        statement_timeout: float = 1.0,
        allow_unsafe_durability: bool = False,
        max_plants_per_user: int | None = None,
    ) -> None:
        self._dsn = dsn
        self._max_plants = max_plants_per_user
        self._pool_size = pool_size
        self._connect_timeout = connect_timeout
        self._statement_timeout = statement_timeout
        self._budget = connect_timeout + statement_timeout
        self._allow_unsafe_durability = allow_unsafe_durability
        self._pool: asyncpg.Pool | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._outage_log = _OutageLog()

    async def open(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(
                self._dsn,
                min_size=0,  # no floor to restore (and warn about) while the database is away
                max_size=self._pool_size,
                timeout=self._connect_timeout,
                command_timeout=self._statement_timeout,
                server_settings=self._server_settings(),
                reset=_keep_session,
            )
            await self._check_durability()
        except StoreOpenError:
            await self.close()
            raise
        except Exception as exc:
            await self.close()
            cause = exc.__cause__ if isinstance(exc, StoreUnavailable) else exc
            raise StoreOpenError(
                f"cannot open the database: {describe_failure(cause or exc)}"
            ) from None

    def _server_settings(self) -> dict[str, str]:
        settings = {
            "application_name": "plantstore",
            "statement_timeout": str(int(self._statement_timeout * 1000)),
        }
        if not self._allow_unsafe_durability:
            settings["synchronous_commit"] = "on"  # whatever the database's default is
        if self._max_plants is not None:  # read by migration 0004's trigger
            settings["plantstore.max_plants_per_user"] = str(self._max_plants)
        return settings

    async def _check_durability(self) -> None:
        """Refuse a server that would acknowledge commits it has not made durable."""
        fsync, synchronous_commit = await self.fetchrow(
            "SELECT current_setting('fsync'), current_setting('synchronous_commit')"
        )
        unsafe = [
            f"{name}={value}"
            for name, value, safe in (
                ("fsync", fsync, fsync == "on"),
                ("synchronous_commit", synchronous_commit, synchronous_commit != "off"),
            )
            if not safe
        ]
        if not unsafe:
            return
        problem = f"PostgreSQL runs with {', '.join(unsafe)}, so a crash loses acknowledged writes"
        if not self._allow_unsafe_durability:
            raise StoreOpenError(
                f"{problem}; turn it on, or set PLANTSTORE_ALLOW_UNSAFE_DURABILITY=true to accept that"
            )
        log.warning("%s (allowed by PLANTSTORE_ALLOW_UNSAFE_DURABILITY)", problem)

    async def close(self) -> None:
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), timeout=self._budget)
            except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                pool.terminate()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.pool.PoolConnectionProxy]:
        """A pooled connection, with every failure of the database turned into a 503."""
        if self._pool is None:
            raise RuntimeError("the store is not open")
        pool = self._pool
        try:
            async with asyncio.timeout(self._budget), pool.acquire() as connection:
                yield connection
        except Exception as exc:
            if not is_outage(exc):
                raise
            # After an outage, connect afresh instead of reusing connections that died.
            await pool.expire_connections()
            self._outage_log.note(exc)
            raise StoreUnavailable() from exc

    async def fetchrow(self, query: str, *args: object) -> asyncpg.Record:
        async with self.connection() as connection:
            row = await connection.fetchrow(query, *args)
        assert row is not None, query
        return row

    async def ping(self) -> None:
        async with self.connection() as connection:
            await connection.fetchval("SELECT 1 FROM secrets LIMIT 1")

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run best-effort ``work`` (a token's 'last used') in the background; ``close`` waits
        for it."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
