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
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, NoReturn

import asyncpg

from ...errors import StoreUnavailable
from ..failures import StoreOpenError, describe_failure
from .connections import ConnectionPool

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
        self._pool: ConnectionPool | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._outage_log = _OutageLog()

    async def open(self) -> None:
        try:
            self._pool = ConnectionPool(self._connect, self._pool_size)
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

    async def _connect(self) -> asyncpg.Connection:
        return await asyncpg.connect(
            self._dsn,
            timeout=self._connect_timeout,
            command_timeout=self._statement_timeout,
            server_settings=self._server_settings(),
        )

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
            await pool.close(self._budget)

    def connection(self) -> Lent:
        """``async with database.connection() as connection``: a pooled connection, with every
        failure of the database turned into a 503."""
        return Lent(self)

    def outage(self, exc: BaseException) -> NoReturn:
        """A 503 for ``exc``; after an outage, connect afresh instead of reusing connections
        that died."""
        if self._pool is not None:
            self._pool.expire()
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


class Lent:
    """A connection lent for one block, within the database's time budget (a class, not an
    ``asynccontextmanager``: this is on every request's path)."""

    __slots__ = ("_connection", "_database", "_generation", "_pool", "_timeout")

    def __init__(self, database: PostgresDatabase) -> None:
        self._database = database

    async def __aenter__(self) -> asyncpg.Connection:
        pool = self._database._pool
        if pool is None:
            raise RuntimeError("the store is not open")
        self._pool = pool
        self._timeout = asyncio.timeout(self._database._budget)
        await self._timeout.__aenter__()
        try:
            self._connection, self._generation = await pool.take()
        except BaseException as exc:
            await self._leave(type(exc), exc, exc.__traceback__)
            raise
        return self._connection

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._pool.give_back(self._connection, self._generation, exc)
        await self._leave(kind, exc, traceback)

    async def _leave(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Leave the time budget; a budget run out, or an outage, is a 503."""
        try:
            await self._timeout.__aexit__(kind, exc, traceback)
        except TimeoutError as expired:
            self._database.outage(expired)
        if isinstance(exc, Exception) and is_outage(exc):
            self._database.outage(exc)
