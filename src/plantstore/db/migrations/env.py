"""Alembic environment: run the migrations on the database the caller named.

PostgreSQL goes through asyncpg, the driver the service uses, so a URL that works for the
service works here; an advisory lock held for the migration transaction makes instances
that start together migrate one after another.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
from alembic import context
from sqlalchemy import Connection, create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

MIGRATION_LOCK = 0x706C616E7473  # "plants": one advisory-lock key for every plantstore


def run_migrations(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    context.configure(connection=connection, target_metadata=None, render_as_batch=sqlite)
    with context.begin_transaction():
        if not sqlite:
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        context.run_migrations()


async def run_on_postgres(dsn: str) -> None:
    def connect() -> Any:
        # Prepared statements named afresh and never cached: behind a pooler in transaction
        # mode the server connection is another client's next, and asyncpg's numbered names
        # would meet the same names there (what SQLAlchemy's asyncpg notes advise).
        dbapi = engine.sync_engine.dialect.dbapi
        assert dbapi is not None  # the asyncpg dialect's adapter, loaded with the engine
        return dbapi.connect(
            async_creator_fn=lambda: asyncpg.connect(dsn, timeout=10, statement_cache_size=0),
            prepared_statement_cache_size=0,
            prepared_statement_name_func=lambda: f"__plantstore_{uuid.uuid4().hex}__",
        )

    engine = create_async_engine("postgresql+asyncpg://", creator=connect, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(run_migrations)
    finally:
        await engine.dispose()


def main() -> None:
    url: str = context.config.attributes["database_url"]
    if url.startswith("sqlite"):
        engine = create_engine(url, poolclass=NullPool)
        with engine.connect() as connection:
            run_migrations(connection)
        engine.dispose()
    else:
        asyncio.run(run_on_postgres(url))


main()
