"""A SQLite file as the copy's source (a read transaction: WAL keeps its snapshot while the
service writes) or target (one write transaction, its triggers dropped and made again)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

from .endpoints import ALEMBIC_TABLE, Row


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _open(path: Path, *, read_only: bool) -> sqlite3.Connection:
    uri = f"{path.resolve().as_uri()}?mode={'ro' if read_only else 'rw'}"
    connection = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30)
    connection.execute("PRAGMA foreign_keys = OFF")  # the copy keeps references intact itself
    return connection


def _tables(connection: sqlite3.Connection) -> dict[str, list[str]]:
    names = [
        row[0]
        for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name"
        )
    ]
    return {
        name: [row[1] for row in connection.execute(f"PRAGMA table_info({_quoted(name)})")]
        for name in names
        if name != ALEMBIC_TABLE
    }


def _count(connection: sqlite3.Connection, table: str) -> int:
    return int(connection.execute(f"SELECT count(*) FROM {_quoted(table)}").fetchone()[0])


def rows_held(path: Path) -> dict[str, int]:
    """How many rows each table of the file holds, Alembic's aside (none without a file)."""
    if not path.exists():
        return {}
    connection = _open(path, read_only=True)
    try:
        return {table: _count(connection, table) for table in _tables(connection)}
    finally:
        connection.close()


class SQLiteSource:
    def __init__(self, path: Path) -> None:
        if not path.exists():
            raise FileNotFoundError(f"no SQLite database at {path}")
        self._connection = _open(path, read_only=True)
        self._connection.execute("BEGIN")
        # The snapshot starts at the first read in the transaction: take it now.
        self._connection.execute("SELECT count(*) FROM sqlite_master").fetchone()

    async def tables(self) -> Mapping[str, Sequence[str]]:
        return _tables(self._connection)

    async def references(self) -> Mapping[str, set[str]]:
        return {
            table: {
                row[2]
                for row in self._connection.execute(f"PRAGMA foreign_key_list({_quoted(table)})")
            }
            for table in _tables(self._connection)
        }

    async def count(self, table: str) -> int:
        return _count(self._connection, table)

    async def rows(
        self, table: str, columns: Sequence[str], batch: int
    ) -> AsyncIterator[list[Row]]:
        cursor = self._connection.execute(
            f"SELECT {', '.join(map(_quoted, columns))} FROM {_quoted(table)}"
        )
        while rows := cursor.fetchmany(batch):
            yield rows

    async def sequence_floors(self) -> Mapping[str, int]:
        return {}  # SQLite's next id is the greatest plus one: nothing beyond the rows

    async def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._connection.execute("ROLLBACK")
        self._connection.close()


class SQLiteTarget:
    def __init__(self, path: Path) -> None:
        self._connection = _open(path, read_only=False)
        self._triggers: list[str] = []

    async def count(self, table: str) -> int:
        return _count(self._connection, table)

    async def begin(self) -> None:
        self._connection.execute("BEGIN IMMEDIATE")
        triggers = self._connection.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
        ).fetchall()
        for name, _ in triggers:
            self._connection.execute(f"DROP TRIGGER {_quoted(name)}")
        self._triggers = [sql for _, sql in triggers]

    async def insert(self, table: str, columns: Sequence[str], rows: list[Row]) -> None:
        self._connection.executemany(
            f"INSERT INTO {_quoted(table)} ({', '.join(map(_quoted, columns))}) "
            f"VALUES ({', '.join('?' for _ in columns)})",
            rows,
        )

    async def clear(self, table: str) -> None:
        self._connection.execute(f"DELETE FROM {_quoted(table)}")

    async def continue_sequences(self, floors: Mapping[str, int]) -> None:
        """Nothing to move: each table's next id follows its greatest (ids the source handed
        out and then deleted may be given again, as SQLite itself does)."""

    async def commit(self) -> None:
        for sql in self._triggers:
            self._connection.execute(sql)
        self._connection.execute("COMMIT")

    async def close(self) -> None:
        if self._connection.in_transaction:
            self._connection.execute("ROLLBACK")
        self._connection.close()
