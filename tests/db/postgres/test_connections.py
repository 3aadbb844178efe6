"""The process's PostgreSQL connections (``db/postgres/connections.py``) against a real server:
which connection a loan gets, how many there are, and who waits."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from plantstore.db.postgres.connections import ConnectionPool
from tests import pg


async def backend_of(connection: asyncpg.Connection) -> int:
    """The PostgreSQL process serving the connection: a new one for each new connection."""
    pid: int = await connection.fetchval("SELECT pg_backend_pid()")
    return pid


def pool_of(url: str, size: int) -> ConnectionPool:
    return ConnectionPool(lambda: asyncpg.connect(url, timeout=10), size)


def test_a_connection_is_kept_after_a_refused_statement_and_made_anew_after_a_timeout(
    postgres: pg.PostgresServer,
) -> None:
    url = postgres.create_database()

    async def run() -> None:
        pool = pool_of(url, size=2)
        async with pool.lend() as connection:
            first = await backend_of(connection)
        async with pool.lend() as connection:
            assert await backend_of(connection) == first
        with pytest.raises(asyncpg.DivisionByZeroError):
            async with pool.lend() as connection:
                await connection.execute("SELECT 1 / 0")
        async with pool.lend() as connection:
            assert await backend_of(connection) == first  # PostgreSQL refused: still fit
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2), pool.lend() as connection:
                await connection.execute("SELECT pg_sleep(30)")
        async with pool.lend() as connection:
            assert await backend_of(connection) != first  # cut off mid-statement: made anew
        await pool.close(5)

    asyncio.run(run())


def test_no_more_connections_than_its_size_and_the_rest_wait_in_turn(
    postgres: pg.PostgresServer,
) -> None:
    url = postgres.create_database()

    async def run() -> tuple[int, set[int], list[int]]:
        pool = pool_of(url, size=2)
        lent = most = 0
        backends: set[int] = set()
        served: list[int] = []

        async def borrow(number: int) -> None:
            nonlocal lent, most
            async with pool.lend() as connection:
                served.append(number)
                lent += 1
                most = max(most, lent)
                backends.add(await backend_of(connection))
                await asyncio.sleep(0.05)
                lent -= 1

        async with pool.lend(), pool.lend():
            pass  # both connections made ahead: the first two asks take them in their order
        tasks = []
        for number in range(8):
            tasks.append(asyncio.create_task(borrow(number)))
            await asyncio.sleep(0.005)  # they ask in this order
        await asyncio.gather(*tasks)
        await pool.close(5)
        return most, backends, served

    most, backends, served = asyncio.run(run())
    assert most == 2
    assert len(backends) == 2
    assert served == list(range(8))


def test_expire_has_every_connection_made_anew_and_a_closed_pool_lends_none(
    postgres: pg.PostgresServer,
) -> None:
    url = postgres.create_database()

    async def run() -> None:
        pool = pool_of(url, size=2)
        async with pool.lend() as held:
            async with pool.lend() as other:
                before = {await backend_of(held), await backend_of(other)}
            pool.expire()  # ``other`` is idle now, ``held`` still lent
        after = set()
        async with pool.lend() as one, pool.lend() as two:
            after = {await backend_of(one), await backend_of(two)}
        assert len(after) == 2
        assert not before & after

        async with pool.lend(), pool.lend():
            waiting = asyncio.create_task(pool.lend().__aenter__())
            await asyncio.sleep(0.05)
            assert not waiting.done()
            closing = asyncio.create_task(pool.close(5))
            with pytest.raises(asyncpg.InterfaceError):
                await waiting
        await closing
        with pytest.raises(asyncpg.InterfaceError):
            async with pool.lend():
                pass

    asyncio.run(run())
