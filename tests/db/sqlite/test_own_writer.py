"""Each process its own writer (the default): two stores on one file in one process stand for
two workers. Both write, each through its own writer, under SQLite's lock in turns; and a
process of the other setting (one writer for the machine) is refused at once with a line
that says why, whichever started first."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import pytest

from plantstore.db.migrate import upgrade
from plantstore.db.sqlite.database import SQLiteDatabase
from plantstore.db.sqlite.ops import WriteOp
from plantstore.errors import StoreUnavailable

WRITES = 200


def insert_mark(conn: sqlite3.Connection, value: int) -> int:
    """A write of a test: one row in a table of its own."""
    conn.execute("INSERT INTO marks (value) VALUES (?)", (value,))
    return value


INSERT_MARK = WriteOp(insert_mark)


def fresh(db: Path) -> None:
    upgrade(f"sqlite:///{db}")
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("CREATE TABLE marks (value INTEGER NOT NULL)")


def test_two_processes_each_commit_their_own_writes(tmp_path: Path) -> None:
    db = tmp_path / "each.db"
    fresh(db)

    async def scenario() -> tuple[list[int], list[int]]:
        first = SQLiteDatabase(db, each_process_writes=True)
        second = SQLiteDatabase(db, each_process_writes=True)
        await first.open()
        await second.open()
        try:
            assert first.writer.engine is not None
            assert second.writer.engine is not None
            assert first.writer.engine is not second.writer.engine
            sent = [
                (first if n % 2 else second).writer.submit(INSERT_MARK, n) for n in range(WRITES)
            ]
            answers = await asyncio.gather(*sent)
            commits = [first.writer.engine.commits, second.writer.engine.commits]
            stored = [row[0] for row in first.read("SELECT value FROM marks ORDER BY value")]
            return list(answers), [*commits, *stored]
        finally:
            await second.close()
            await first.close()

    answers, found = asyncio.run(scenario())
    commits, stored = found[:2], found[2:]
    assert answers == list(range(WRITES))
    assert stored == list(range(WRITES))
    assert all(count > 0 for count in commits), commits  # each committed its own


@pytest.mark.parametrize("first_each", [True, False])
def test_a_process_of_the_other_setting_is_refused_at_start(
    tmp_path: Path, first_each: bool
) -> None:
    db = tmp_path / "mixed.db"
    fresh(db)

    async def scenario() -> str:
        first = SQLiteDatabase(db, each_process_writes=first_each)
        await first.open()
        try:
            second = SQLiteDatabase(db, each_process_writes=not first_each)
            with pytest.raises(StoreUnavailable) as refused:
                await second.open()
            await second.close()
            await first.writer.submit(INSERT_MARK, 1)  # the first writes on
            return str(refused.value)
        finally:
            await first.close()

    message = asyncio.run(scenario())
    assert "PLANTSTORE_SQLITE_WRITERS" in message
    assert "same setting" in message
