"""PostgreSQL's connection pool as the features' stores share it: asyncpg, plain SQL.

Every statement runs in autocommit (or one short transaction) and PostgreSQL flushes its
WAL before answering the commit, so an acknowledged write is on disk; a server that would
not (``fsync`` or ``synchronous_commit`` off) is refused at start unless allowed.

While the database is unreachable every call fails within ``connect_timeout +
statement_timeout`` with ``StoreUnavailable`` (503, naming the trouble: ``faults``), never a
hang; the pool reconnects by itself once the database is back. A block whose connection the
server ended (a restart, a failover, ``pg_terminate_backend``) is a 503 too, whatever the
client library called it, and a connection the server has spoken to while it sat idle (its
goodbye) is never lent. ``ready`` answers ``/readyz`` from the outages the requests met and,
at most once a second, a one-row write (``txid_current()`` commits a transaction id).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, NoReturn

import asyncpg

from ...errors import StoreUnavailable
from ..failures import StoreOpenError, describe_failure
from ..health import Readiness, WriteHealth
from .connections import ConnectionPool, connect_to_writer
from .faults import outage_of
from .pooling import (
    Pooling,
    check_held,
    check_prepared_kept,
    startup_settings,
    statement_cache_size,
)

log = logging.getLogger(__name__)


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
        pooling: Pooling = "none",
        pooler_keeps_prepared: bool = False,
        on_refusal: Callable[[str], None] | None = None,
    ) -> None:
        self._dsn = dsn
        self._pooling: Pooling = pooling
        self._pooler_keeps_prepared = pooler_keeps_prepared
        self._pool_size = pool_size
        self._connect_timeout = connect_timeout
        self._statement_timeout = statement_timeout
        self.budget = connect_timeout + statement_timeout  # the most a block may take
        self._allow_unsafe_durability = allow_unsafe_durability
        self._pool: ConnectionPool | None = None
        self._background: set[asyncio.Task[None]] = set()
        self.health = WriteHealth(on_refusal)
        self._readiness = Readiness(self.health, self._probe)

    async def open(self) -> None:
        try:
            self._pool = ConnectionPool(self._connect, self._pool_size)
            await self._check_durability()
            async with self.connection() as connection:
                await check_held(
                    connection,
                    self._pooling,
                    self._statement_timeout,
                    self._allow_unsafe_durability,
                )
                if self._pooling == "transaction" and self._pooler_keeps_prepared:
                    second = await self._connect(cache_statements=False)
                    try:
                        await check_prepared_kept(connection, second)
                    finally:
                        await second.close()
        except StoreOpenError:
            await self.close()
            raise
        except Exception as exc:
            await self.close()
            cause = exc.__cause__ if isinstance(exc, StoreUnavailable) else exc
            raise StoreOpenError(
                f"cannot open the database: {describe_failure(cause or exc)}"
            ) from None

    async def _connect(self, *, cache_statements: bool = True) -> asyncpg.Connection:
        cached = statement_cache_size(self._pooling, self._pooler_keeps_prepared)
        return await connect_to_writer(
            self._dsn,
            timeout=self._connect_timeout,
            command_timeout=self._statement_timeout,
            statement_cache_size=cached if cache_statements else 0,
            server_settings=startup_settings(
                self._pooling, self._statement_timeout, not self._allow_unsafe_durability
            ),
        )

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
            await pool.close(self.budget)

    def connection(self) -> Lent:
        """``async with database.connection() as connection``: a pooled connection, with every
        failure of the database turned into a 503."""
        return Lent(self)

    def outage(self, exc: BaseException, fault: StoreUnavailable | None = None) -> NoReturn:
        """A 503 for ``exc``; after an outage, connect afresh instead of reusing connections
        that died."""
        if self._pool is not None:
            self._pool.expire()
        fault = fault or outage_of(exc) or StoreUnavailable()
        self.health.refused(fault)
        log.debug("database unavailable: %s", describe_failure(exc))
        raise StoreUnavailable(fault.message, fault.kind) from exc

    async def fetchrow(self, query: str, *args: object) -> asyncpg.Record:
        async with self.connection() as connection:
            row = await connection.fetchrow(query, *args)
        assert row is not None, query
        return row

    async def ready(self) -> None:
        """Return if a write would be taken now; raise the 503 that says why not."""
        await self._readiness.check()

    async def _probe(self) -> None:
        async with self.connection() as connection:
            await connection.fetchval("SELECT 1 FROM secrets LIMIT 1")
            await connection.fetchval("SELECT txid_current()")  # commits: a WAL flush
        self.health.served()

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
        self._timeout = asyncio.timeout(self._database.budget)
        await self._timeout.__aenter__()
        try:
            self._connection, self._generation = await pool.take()
        except BaseException as exc:
            await self._leave(type(exc), exc, exc.__traceback__, closed=False)
            raise
        return self._connection

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        closed = exc is not None and self._connection.is_closed()  # the server ended it
        self._pool.give_back(self._connection, self._generation, exc)
        if exc is None and self._database.health.fault_kind is not None:
            self._database.health.served()  # the database answers again: the fault is over
        await self._leave(kind, exc, traceback, closed=closed)

    async def _leave(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
        *,
        closed: bool,
    ) -> None:
        """Leave the time budget; a budget run out, or an outage, is a 503."""
        try:
            await self._timeout.__aexit__(kind, exc, traceback)
        except TimeoutError as expired:
            self._database.outage(expired)
        if isinstance(exc, Exception):
            fault = outage_of(exc, connection_closed=closed)
            if fault is not None:
                self._database.outage(exc, fault)
