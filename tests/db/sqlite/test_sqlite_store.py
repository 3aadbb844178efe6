"""The SQLite store on real files: every write synced before its answer, group commit,
failures isolated, reads free."""

from __future__ import annotations

import asyncio
import sqlite3
import struct
import threading
import time
from pathlib import Path

import pytest

from plantstore.db.migrate import upgrade
from plantstore.db.sqlite import locks_file
from plantstore.db.sqlite.connection import connect
from plantstore.db.sqlite.database import SQLiteDatabase
from plantstore.db.sqlite.ops import WriteOp
from plantstore.db.sqlite.writer import Writer
from plantstore.errors import StoreUnavailable
from plantstore.plants.store import CreateOutcome, PlantRecord
from plantstore.settings import Settings
from tests.stores import Stores


def open_store(db_path: Path, group_commit: bool = True) -> Stores:
    url = f"sqlite:///{db_path}"
    upgrade(url)
    return Stores(Settings(database_url=url, group_commit=group_commit))


def writer_of(store: Stores) -> Writer:
    """The writer itself: a store alone on its file owns the machine's writer."""
    assert isinstance(store.database, SQLiteDatabase)
    engine = store.database.writer.engine
    assert engine is not None
    return engine


async def user_id(store: Stores, name: str = "alice") -> int:
    return (await store.tokens.create_token(name, name * 8, None)).user_id


def test_the_writer_commits_in_wal_and_answers_after_syncing_it(db_path: Path) -> None:
    """The writer's commit does not fsync under SQLite's lock (synchronous=NORMAL); its
    answer waits for an fsync of the WAL that began after the commit (the counters of
    ``<database>-locks``: fsyncs started and finished)."""

    async def scenario() -> tuple[object, object]:
        store = open_store(db_path)
        await store.open()
        try:
            pragmas = await writer_of(store).submit(PRAGMAS)
            before = flush_counters(db_path)
            await store.plants.create_plant(await user_id(store), PlantRecord(1, "Fern", None))
            after = flush_counters(db_path)
            assert after[0] == after[1] > before[1]  # a new fsync, begun and finished
            return pragmas
        finally:
            await store.close()

    assert asyncio.run(scenario()) == ("wal", 1)  # 1 = NORMAL: the flusher syncs


def pragmas(conn: sqlite3.Connection) -> tuple[object, object]:
    return (
        conn.execute("PRAGMA journal_mode").fetchone()[0],
        conn.execute("PRAGMA synchronous").fetchone()[0],
    )


def block(conn: sqlite3.Connection, entered: threading.Event, release: threading.Event) -> None:
    """Hold the writer until ``release`` (the events pass as they are: one process here)."""
    entered.set()
    release.wait(10)


def delete_and_wait(conn: sqlite3.Connection, release: threading.Event) -> None:
    conn.execute("DELETE FROM plants")  # uncommitted while the test reads
    release.wait(10)


PRAGMAS = WriteOp(pragmas)
BLOCK = WriteOp(block)
DELETE_AND_WAIT = WriteOp(delete_and_wait)


def flush_counters(db_path: Path) -> tuple[int, int]:
    """(fsyncs started, fsyncs finished) as every writer of the file shares them."""
    started, finished = struct.unpack("=QQ", locks_file.path_of(db_path).read_bytes()[:16])
    return started, finished


def test_a_new_database_opened_while_another_connection_writes_waits_for_wal(
    tmp_path: Path,
) -> None:
    """Turning a rollback-journal file into WAL while another connection holds the write lock
    fails at once in SQLite, without its busy handler (workers opening a new database together
    saw "database is locked"); the store waits for the lock instead, within the busy timeout."""
    path = tmp_path / "new.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    assert holder.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    release.start()
    started = time.monotonic()
    conn = connect(path, busy_timeout_ms=5_000)
    waited = time.monotonic() - started
    release.join()
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert 0.2 < waited < 4
    finally:
        conn.close()
        holder.close()


def test_wal_is_given_up_at_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            connect(path, busy_timeout_ms=300)
        assert 0.25 < time.monotonic() - started < 3
    finally:
        holder.close()


@pytest.mark.parametrize("group_commit", [True, False])
def test_concurrent_writes_share_commits_only_with_group_commit(
    db_path: Path, group_commit: bool
) -> None:
    async def scenario() -> tuple[int, int, list[CreateOutcome]]:
        store = open_store(db_path, group_commit)
        await store.open()
        try:
            owner = await user_id(store)
            before = writer_of(store).commits
            outcomes = await asyncio.gather(
                *(
                    store.plants.create_plant(owner, PlantRecord(i, f"p{i}", None))
                    for i in range(200)
                )
            )
            stored = len(await store.plants.list_plants(owner, None, 1_000))
            return writer_of(store).commits - before, stored, outcomes
        finally:
            await store.close()

    commits, stored, outcomes = asyncio.run(scenario())
    assert stored == 200
    assert set(outcomes) == {CreateOutcome.CREATED}
    if group_commit:
        assert commits < 200 / 4, f"{commits} commits for 200 concurrent writes"
    else:
        assert commits == 200


def test_a_failing_write_fails_alone_within_its_group(db_path: Path) -> None:
    entered, release = threading.Event(), threading.Event()

    async def scenario() -> tuple[list[CreateOutcome | BaseException], int, int]:
        store = open_store(db_path)
        await store.open()
        try:
            owner = await user_id(store)
            blocker = asyncio.ensure_future(writer_of(store).submit(BLOCK, entered, release))
            # The writer is busy once the blocker runs; the next jobs queue up together.
            assert await asyncio.to_thread(entered.wait, 10)
            before = writer_of(store).commits
            good = [store.plants.create_plant(owner, PlantRecord(i, "ok", None)) for i in range(5)]
            bad = store.plants.create_plant(owner + 1_000, PlantRecord(99, "no such user", None))
            results = asyncio.gather(*good[:2], bad, *good[2:], return_exceptions=True)
            await asyncio.sleep(0.05)
            release.set()
            await blocker
            outcomes = list(await results)
            stored = len(await store.plants.list_plants(owner, None, 100))
            return outcomes, stored, writer_of(store).commits - before
        finally:
            await store.close()

    outcomes, stored, commits = asyncio.run(scenario())
    assert isinstance(outcomes[2], sqlite3.IntegrityError)  # foreign key: no such user
    assert [o for i, o in enumerate(outcomes) if i != 2] == [CreateOutcome.CREATED] * 5
    assert stored == 5
    assert commits == 2  # the blocker alone, then the five good writes and the bad one together


def test_reads_do_not_wait_for_an_open_write_transaction(db_path: Path) -> None:
    release = threading.Event()

    async def scenario() -> float:
        store = open_store(db_path)
        await store.open()
        try:
            owner = await user_id(store)
            await store.plants.create_plant(owner, PlantRecord(1, "visible", None))
            held = asyncio.ensure_future(writer_of(store).submit(DELETE_AND_WAIT, release))
            await asyncio.sleep(0.05)
            started = time.monotonic()
            plants = await store.plants.list_plants(owner, None, 10)
            elapsed = time.monotonic() - started
            assert [plant.name for plant in plants] == ["visible"]
            release.set()
            await held
            return elapsed
        finally:
            await store.close()

    assert asyncio.run(scenario()) < 1.0  # far below the 5 s busy timeout it would hit if blocked


def test_repeated_create_reports_unchanged_or_conflict(db_path: Path) -> None:
    async def scenario() -> list[CreateOutcome]:
        store = open_store(db_path)
        await store.open()
        try:
            owner = await user_id(store)
            plant = PlantRecord(7, "Fern", "green")
            return [
                await store.plants.create_plant(owner, plant),
                await store.plants.create_plant(owner, plant),
                await store.plants.create_plant(owner, PlantRecord(7, "Fern", None)),
            ]
        finally:
            await store.close()

    assert asyncio.run(scenario()) == [
        CreateOutcome.CREATED,
        CreateOutcome.UNCHANGED,
        CreateOutcome.CONFLICT,
    ]


def test_a_write_after_the_writer_stopped_is_a_503_at_once(db_path: Path) -> None:
    """No caller waits for a writer that is no more (stopped, or ended on a fault): the
    write is refused as unavailable, with Retry-After, as the contract's 503."""

    async def scenario() -> None:
        store = open_store(db_path)
        await store.open()
        uid = await user_id(store)
        writer_of(store).stop()
        began = time.monotonic()
        with pytest.raises(StoreUnavailable) as refused:
            await store.plants.create_plant(uid, PlantRecord(1, "Fern", None))
        assert time.monotonic() - began < 1
        assert refused.value.status == 503
        assert refused.value.headers == {"Retry-After": "1"}
        assert not writer_of(store).alive
        await store.close()

    asyncio.run(scenario())
