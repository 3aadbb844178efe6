"""A PostgreSQL database as the copy's source (a repeatable-read, read-only transaction: one
snapshot however long the copy takes) or target (one transaction, rows sent with COPY, the
tables' own triggers disabled until the commit)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence

import asyncpg

from .endpoints import ALEMBIC_TABLE, Row

_COLUMNS = """
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relkind IN ('r', 'p') AND n.nspname = current_schema()
ORDER BY c.relname, a.attnum
"""
_REFERENCES = """
SELECT c.relname, r.relname
FROM pg_constraint k
JOIN pg_class c ON c.oid = k.conrelid
JOIN pg_class r ON r.oid = k.confrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE k.contype = 'f' AND n.nspname = current_schema()
"""
# Each table's generated id column and its sequence (serial and identity columns alike).
_SEQUENCES = """
SELECT c.relname, a.attname, pg_get_serial_sequence(quote_ident(c.relname), a.attname)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relkind IN ('r', 'p') AND n.nspname = current_schema()
  AND pg_get_serial_sequence(quote_ident(c.relname), a.attname) IS NOT NULL
"""


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def _columns(connection: asyncpg.Connection) -> dict[str, list[tuple[str, str]]]:
    tables: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in await connection.fetch(_COLUMNS):
        if table != ALEMBIC_TABLE:
            tables.setdefault(table, []).append((column, kind))
    return tables


async def _count(connection: asyncpg.Connection, table: str) -> int:
    return int(await connection.fetchval(f"SELECT count(*) FROM {_quoted(table)}"))


async def rows_held(url: str) -> dict[str, int]:
    """How many rows each table holds, Alembic's aside."""
    connection = await asyncpg.connect(url, timeout=10)
    try:
        return {table: await _count(connection, table) for table in await _columns(connection)}
    finally:
        await connection.close()


class PostgresSource:
    def __init__(self, connection: asyncpg.Connection) -> None:
        self._connection = connection

    @classmethod
    async def open(cls, url: str) -> PostgresSource:
        connection = await asyncpg.connect(url, timeout=10)
        await connection.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        await connection.fetchval("SELECT 1")  # the snapshot starts at the first statement
        return cls(connection)

    async def tables(self) -> Mapping[str, Sequence[str]]:
        return {
            table: [name for name, _ in columns]
            for table, columns in (await _columns(self._connection)).items()
        }

    async def references(self) -> Mapping[str, set[str]]:
        references: dict[str, set[str]] = {table: set() for table in await self.tables()}
        for table, referred in await self._connection.fetch(_REFERENCES):
            references.setdefault(table, set()).add(referred)
        return references

    async def count(self, table: str) -> int:
        return await _count(self._connection, table)

    async def rows(
        self, table: str, columns: Sequence[str], batch: int
    ) -> AsyncIterator[list[Row]]:
        cursor = await self._connection.cursor(
            f"SELECT {', '.join(map(_quoted, columns))} FROM {_quoted(table)}"
        )
        while rows := await cursor.fetch(batch):
            yield [tuple(row) for row in rows]

    async def sequence_floors(self) -> Mapping[str, int]:
        floors = {}
        for table, _, sequence in await self._connection.fetch(_SEQUENCES):
            state = await self._connection.fetchrow(f"SELECT last_value, is_called FROM {sequence}")
            assert state is not None
            floors[table] = int(state["last_value"]) if state["is_called"] else 0
        return floors

    async def close(self) -> None:
        await self._connection.close()


class PostgresTarget:
    def __init__(self, connection: asyncpg.Connection) -> None:
        self._connection = connection
        self._tables: dict[str, list[tuple[str, str]]] = {}

    @classmethod
    async def open(cls, url: str) -> PostgresTarget:
        return cls(await asyncpg.connect(url, timeout=10))

    async def count(self, table: str) -> int:
        return await _count(self._connection, table)

    async def begin(self) -> None:
        await self._connection.execute("BEGIN")
        self._tables = await _columns(self._connection)
        for table in self._tables:  # our triggers; foreign keys are still checked
            await self._connection.execute(f"ALTER TABLE {_quoted(table)} DISABLE TRIGGER USER")

    async def insert(self, table: str, columns: Sequence[str], rows: list[Row]) -> None:
        kinds = dict(self._tables[table])
        flags = [i for i, column in enumerate(columns) if kinds[column] == "boolean"]
        if flags:  # SQLite hands booleans over as 0 and 1
            rows = [
                tuple(bool(v) if i in flags and v is not None else v for i, v in enumerate(row))
                for row in rows
            ]
        await self._connection.copy_records_to_table(table, records=rows, columns=list(columns))

    async def clear(self, table: str) -> None:
        await self._connection.execute(f"DELETE FROM {_quoted(table)}")

    async def continue_sequences(self, floors: Mapping[str, int]) -> None:
        for table, column, sequence in await self._connection.fetch(_SEQUENCES):
            greatest = await self._connection.fetchval(
                f"SELECT max({_quoted(column)}) FROM {_quoted(table)}"
            )
            last = max(int(greatest or 0), floors.get(table, 0))
            if last > 0:
                await self._connection.execute("SELECT setval($1, $2)", sequence, last)

    async def commit(self) -> None:
        for table in self._tables:
            await self._connection.execute(f"ALTER TABLE {_quoted(table)} ENABLE TRIGGER USER")
        await self._connection.execute("COMMIT")

    async def close(self) -> None:
        await self._connection.close()  # an open transaction is rolled back
