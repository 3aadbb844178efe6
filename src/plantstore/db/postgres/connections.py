"""The PostgreSQL connections of one process: asyncpg connections, lent one block at a time.

asyncpg's pool wraps each loan in a proxy, a future, an inactivity timer and, on release, a
task of its own (``asyncio.shield``): more work for the client than the statement itself. A
list of idle connections does what the service needs of a pool:

- at most ``size`` connections, each made when first needed, so none is held (or retried)
  while the database is away;
- a request that finds them all lent waits its turn (first come, first served);
- ``expire`` (after an outage) has every connection made anew: the idle ones at once, the lent
  ones as they come back;
- a connection comes back as it is when its block ended well or PostgreSQL refused a statement
  (a constraint, the plant quota): the service's sessions hold nothing to undo (no LISTEN,
  cursor, SET or session lock), and ``transaction()`` has rolled its own back already. After
  anything else (a timeout, a cancellation, a lost connection) it may be mid-statement, so it
  is terminated, and the next request makes a new one.

``connect_to_writer`` makes a connection to a URL of several hosts by trying them all at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import select
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import asyncpg

from ..urls import postgres_hosts, session_attrs

Connect = Callable[[], Awaitable[asyncpg.Connection]]
_RACED_ATTRS = ("read-write", "primary")  # one host only can be it: the first to say so wins
_HOST_FAILURES = (  # a standby's "not read-write" is no InterfaceError
    OSError,
    TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.TargetServerAttributeNotMatched,
)


async def connect_to_writer(dsn: str, *, timeout: float, **options: Any) -> asyncpg.Connection:
    """``asyncpg.connect``, but a URL's hosts tried all at once when it asks for the primary.

    asyncpg tries them in turn within one ``timeout`` for all: a host that takes the TCP
    connection and never answers (a frozen server, a machine gone behind a network that drops
    its packets) spends the whole of it, and while such a host is listed before the promoted
    one, no connection is made at all. At once, the primary answers within its own round trips
    whatever the others do; the connections to the rest are dropped."""
    hosts = postgres_hosts(dsn)
    if len(hosts) < 2 or session_attrs(dsn) not in _RACED_ATTRS:
        return await asyncpg.connect(dsn, timeout=timeout, **options)
    attempts = [
        asyncio.ensure_future(asyncpg.connect(_one_host(dsn, host), timeout=timeout, **options))
        for host in hosts
    ]
    errors: list[Exception] = []
    chosen: asyncpg.Connection | None = None
    try:
        for attempt in asyncio.as_completed(attempts, timeout=timeout):
            try:
                chosen = await attempt
                return chosen
            except _HOST_FAILURES as exc:
                errors.append(exc)  # this host cannot serve: the others may
    finally:
        for attempt in attempts:  # the rest: stopped, or their connections ended
            if not attempt.done():
                attempt.cancel()
            elif (
                not attempt.cancelled()
                and attempt.exception() is None
                and attempt.result() is not chosen
            ):
                attempt.result().terminate()
    standby = [e for e in errors if isinstance(e, asyncpg.TargetServerAttributeNotMatched)]
    raise (standby or errors)[-1]  # a standby answered: no primary yet, else the last failure


def _one_host(dsn: str, host: str) -> str:
    scheme, _, rest = dsn.partition("://")
    netloc = rest.partition("/")[0].partition("?")[0]
    user, at, _ = netloc.rpartition("@")
    return f"{scheme}://{user}{at}{host}{rest[len(netloc) :]}"


class ConnectionPool:
    """Up to ``size`` connections made by ``connect``, lent by ``lend()``."""

    def __init__(self, connect: Connect, size: int) -> None:
        self._connect = connect
        self._size = size
        self._idle: list[asyncpg.Connection] = []  # the last one back is lent first
        self._made = 0  # idle, lent, or being made
        # A waiter is handed a connection, or None: a connection of its own to make.
        self._waiting: collections.deque[asyncio.Future[asyncpg.Connection | None]] = (
            collections.deque()
        )
        self._generation = 0
        self._closed = False
        self._all_back = asyncio.Event()  # set while nothing is lent or being made
        self._all_back.set()

    def lend(self) -> Loan:
        return Loan(self)

    def expire(self) -> None:
        """Make every connection anew: those idle now, and each lent one when it comes back."""
        self._generation += 1
        idle, self._idle = self._idle, []
        for connection in idle:
            self._drop(connection)
        self._settle()

    async def close(self, timeout: float) -> None:
        """Take no more loans; wait up to ``timeout`` for the lent ones, then close them all."""
        self._closed = True
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_exception(_closed())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._all_back.wait()
        idle, self._idle = self._idle, []
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*(connection.close() for connection in idle))
        except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            for connection in idle:
                connection.terminate()

    async def take(self) -> tuple[asyncpg.Connection, int]:
        """A connection, and the generation it belongs to; first come, first served."""
        if self._closed:
            raise _closed()
        if not self._waiting:
            while self._idle:
                connection = self._idle.pop()
                if connection.is_closed():
                    self._made -= 1  # it died while idle
                elif spoke_while_idle(connection):
                    self._drop(connection)  # its goodbye, most likely: never lent
                else:
                    self._all_back.clear()
                    return connection, self._generation
            if self._made < self._size:
                self._made += 1
                return await self._make(), self._generation
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            handed = await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._pass_on(waiter.result())  # handed a turn it no longer wants
            else:
                with contextlib.suppress(ValueError):
                    self._waiting.remove(waiter)
            raise
        if handed is None:
            return await self._make(), self._generation
        return handed, self._generation

    async def _make(self) -> asyncpg.Connection:
        """Make the connection already counted in ``_made``."""
        self._all_back.clear()
        try:
            return await self._connect()
        except BaseException:
            self._made -= 1
            self._settle()
            raise

    def give_back(
        self, connection: asyncpg.Connection, generation: int, error: BaseException | None
    ) -> None:
        """Keep the connection for the next loan, unless the ``error`` its block ended with,
        if any, may have left it unfit (above)."""
        failed = error is not None and not isinstance(error, asyncpg.PostgresError)
        unfit = failed or self._closed or generation != self._generation
        if unfit or connection.is_closed() or connection.is_in_transaction():
            self._drop(connection)
        else:
            self._pass_on(connection)
        self._settle()

    def _pass_on(self, connection: asyncpg.Connection | None) -> None:
        """To the next waiter; else a connection goes idle, and a turn to make one lapses."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return
        if connection is None:
            self._made -= 1
        else:
            self._idle.append(connection)

    def _drop(self, connection: asyncpg.Connection) -> None:
        connection.terminate()
        self._made -= 1

    def _settle(self) -> None:
        """Let waiters make the connections there is room for; note when all are back."""
        while self._waiting and self._made < self._size and not self._closed:
            self._made += 1
            self._pass_on(None)
        if self._made == len(self._idle):
            self._all_back.set()


def spoke_while_idle(connection: asyncpg.Connection) -> bool:
    """Whether the server sent something the client has not read yet to a connection that
    sat idle: a server ends a connection (a restart, ``pg_terminate_backend``) by sending
    FATAL and closing, and a connection lent before its event loop reads that fails its
    statement with a client error rather than a connection error. One ``poll`` of the
    socket tells, before the loan."""
    transport = getattr(connection, "_transport", None)  # asyncpg shows no way to peek
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return False
    readable, _, _ = select.select([sock.fileno()], [], [], 0)
    return bool(readable)


def _closed() -> asyncpg.InterfaceError:
    return asyncpg.InterfaceError("the connection pool is closed")


class Loan:
    """``async with pool.lend() as connection``: one connection for the block."""

    __slots__ = ("_connection", "_generation", "_pool")

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool

    async def __aenter__(self) -> asyncpg.Connection:
        self._connection, self._generation = await self._pool.take()
        return self._connection

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._pool.give_back(self._connection, self._generation, exc)
