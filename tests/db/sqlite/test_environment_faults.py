"""Faults of the environment under a real SQLite file, met by the store in this process: a
full database (SQLite's own SQLITE_FULL, through ``max_page_count``), the file removed and
put back, a writer that stalls past the write deadline, and what ``/readyz`` (``ready``)
says of each. The same faults on real disks (a full, failing and frozen ext4) and under a
real server are ``tests/faults``'."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from plantstore.db.health import FAULT_FRESH_S, OK_FRESH_S
from plantstore.db.migrate import upgrade
from plantstore.db.sqlite.database import SQLiteDatabase
from plantstore.db.sqlite.ops import WriteOp
from plantstore.errors import StoreUnavailable

# Loop devices are the machine's: the tests that attach them run one at a time, on one worker.
pytestmark = [pytest.mark.root, pytest.mark.xdist_group("loop-devices")]

T = TypeVar("T")


def run_with(db: Path, scenario: Callable[[SQLiteDatabase], Awaitable[T]], **options: float) -> T:
    upgrade(f"sqlite:///{db}")

    async def main() -> T:
        database = SQLiteDatabase(db, **options)  # type: ignore[arg-type]
        await database.open()
        try:
            return await scenario(database)
        finally:
            await database.close()

    return asyncio.run(main())


def fill(conn: sqlite3.Connection) -> None:
    """Hold the file to its current size, then grow it: SQLite answers SQLITE_FULL."""
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {pages}")
    conn.execute("CREATE TABLE IF NOT EXISTS filler (x BLOB)")
    conn.execute("INSERT INTO filler VALUES (zeroblob(1000000))")


def unlimit(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA max_page_count = 4294967294")


def insert_note(conn: sqlite3.Connection, name: str) -> int:
    conn.execute("CREATE TABLE IF NOT EXISTS notes (name TEXT)")
    cursor = conn.execute("INSERT INTO notes (name) VALUES (?)", (name,))
    return int(cursor.lastrowid or 0)


def stall(conn: sqlite3.Connection) -> None:
    """A disk that does not answer, as the writer's thread sees it."""
    time.sleep(2.0)


FILL = WriteOp(fill)
UNLIMIT = WriteOp(unlimit)
INSERT_NOTE = WriteOp(insert_note)
STALL = WriteOp(stall)


def test_a_full_database_is_a_503_that_says_so_and_readiness_follows(tmp_path: Path) -> None:
    async def scenario(database: SQLiteDatabase) -> None:
        await database.ready()
        writer = database.writer
        with pytest.raises(StoreUnavailable) as refused:
            await writer.submit(FILL)
        assert refused.value.kind == "disk_full"
        assert refused.value.message == "the database's disk is full; retry later"
        assert refused.value.headers == {"Retry-After": "1"}
        with pytest.raises(StoreUnavailable, match="disk is full"):
            await database.ready()  # the refusal is fresh: no probe needed to know
        await writer.submit(UNLIMIT)  # space again: the next write is taken
        assert await writer.submit(INSERT_NOTE, "after") > 0
        await database.ready()

    run_with(tmp_path / "full.db", scenario)


def test_a_removed_file_refuses_reads_and_writes_until_it_is_back(tmp_path: Path) -> None:
    db = tmp_path / "moved.db"
    aside = tmp_path / "aside.db"

    async def scenario(database: SQLiteDatabase) -> None:
        assert await database.writer.submit(INSERT_NOTE, "before") > 0
        os.rename(db, aside)
        with pytest.raises(StoreUnavailable) as refused:
            await database.writer.submit(INSERT_NOTE, "into the void")  # committed, refused
        assert refused.value.kind == "file_replaced"
        assert str(db) not in refused.value.message  # never a path to a client
        with pytest.raises(StoreUnavailable, match="removed or replaced"):
            await database.writer.submit(INSERT_NOTE, "while away")  # refused, not written
        time.sleep(0.3)  # reads look at the file every quarter second
        with pytest.raises(StoreUnavailable, match="removed or replaced"):
            database.read("SELECT count(*) FROM notes")
        with pytest.raises(StoreUnavailable, match="removed or replaced"):
            await database.ready()
        os.rename(aside, db)  # put back: served again without a restart
        time.sleep(0.3)
        assert database.read("SELECT name FROM notes WHERE name = 'before'").fetchone()
        assert await database.writer.submit(INSERT_NOTE, "after") > 0
        await database.ready()

    run_with(db, scenario)
    with sqlite3.connect(db) as conn:
        names = {name for (name,) in conn.execute("SELECT name FROM notes")}
    assert {"before", "after"} <= names
    assert "while away" not in names  # once the file was found gone, nothing was written


def test_a_stalled_write_is_a_503_at_its_deadline_and_is_never_made(tmp_path: Path) -> None:
    """A disk that does not answer holds the writer's thread (a sleep stands in for it here):
    callers get a 503 at the write timeout, /readyz says so within a stall's threshold, and a
    write whose caller was answered 503 is not made when the disk comes back."""

    async def scenario(database: SQLiteDatabase) -> tuple[float, list[str]]:
        writer = database.writer
        stalled = asyncio.ensure_future(writer.submit(STALL))
        await asyncio.sleep(0.05)
        began = time.monotonic()
        with pytest.raises(StoreUnavailable) as late:
            await writer.submit(INSERT_NOTE, "late")
        waited = time.monotonic() - began
        assert late.value.kind == "not_answering"
        with pytest.raises(StoreUnavailable, match="not answering"):
            await database.ready()
        with pytest.raises(StoreUnavailable):
            await stalled
        await asyncio.sleep(1.2)  # the stall is over
        await writer.submit(INSERT_NOTE, "on time")
        names = [name for (name,) in database.read("SELECT name FROM notes")]
        return waited, names

    waited, names = run_with(tmp_path / "stall.db", scenario, write_timeout=1.0)
    assert 0.9 <= waited < 1.5, waited
    assert "on time" in names
    assert "late" not in names


def test_readiness_probes_at_most_once_a_second_on_an_idle_store(tmp_path: Path) -> None:
    async def scenario(database: SQLiteDatabase) -> int:
        writer = database.writer
        engine = writer.engine
        assert engine is not None
        await database.ready()  # a probe: nothing was written yet
        first = engine.commits
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            await database.ready()
            await asyncio.sleep(0.05)
        return engine.commits - first

    probes = run_with(tmp_path / "idle.db", scenario)
    assert 1 <= probes <= 3, probes
    assert FAULT_FRESH_S <= OK_FRESH_S <= 1.0


def test_a_server_refuses_to_start_where_its_database_was_removed(tmp_path: Path) -> None:
    db = tmp_path / "gone.db"
    run_with(db, lambda database: database.writer.submit(INSERT_NOTE, "someone"))
    db.unlink()
    from plantstore.db.failures import StoreOpenError

    with pytest.raises(StoreOpenError, match="the database was removed"):
        upgrade(f"sqlite:///{db}")
    assert not db.exists()  # no new, empty database in its place
