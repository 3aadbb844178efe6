"""PostgreSQL for a run: whether the server answers, and a scratch database that is dropped
afterwards, so no run sees another's rows."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg


@contextmanager
def postgres_database(admin_url: str) -> Iterator[str]:
    name = f"plantstore_bench_{uuid.uuid4().hex[:8]}"

    async def run(statement: str) -> None:
        connection = await asyncpg.connect(admin_url)
        try:
            await connection.execute(statement)
        finally:
            await connection.close()

    asyncio.run(run(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        asyncio.run(run(f'DROP DATABASE "{name}" WITH (FORCE)'))


def postgres_problem(admin_url: str) -> str | None:
    """Why the PostgreSQL server cannot be used, or None when it answers."""

    async def probe() -> None:
        connection = await asyncpg.connect(admin_url, timeout=3)
        await connection.close()

    try:
        asyncio.run(probe())
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        return f"{admin_url} unreachable ({type(exc).__name__}: {exc})"
    return None
