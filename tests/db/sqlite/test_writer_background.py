"""The SQLite writer's background jobs (the sandbox purge's steps): while requests' writes come
in, one waits to share a request's commit instead of adding a commit of its own; on an idle
writer it goes at once, alone."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from plantstore.db.sqlite import writer as sqlite_writer
from plantstore.db.sqlite.ops import WriteOp
from plantstore.db.sqlite.writer import Writer


def create_table(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE t (x INTEGER)")


def insert(conn: sqlite3.Connection, value: int) -> int:
    conn.execute("INSERT INTO t (x) VALUES (?)", (value,))
    return value


def insert_in_background(conn: sqlite3.Connection, value: int) -> int:
    return insert(conn, value)


def create_table_in_background(conn: sqlite3.Connection) -> None:
    create_table(conn)


CREATE_TABLE = WriteOp(create_table)
INSERT = WriteOp(insert)
CREATE_TABLE_IN_BACKGROUND = WriteOp(create_table_in_background, background=True)
INSERT_IN_BACKGROUND = WriteOp(insert_in_background, background=True)


def test_a_background_job_shares_a_request_writes_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A second of patience, so a slow machine cannot make the request miss the batch.
    monkeypatch.setattr(sqlite_writer, "BACKGROUND_WAIT_S", 1.0)

    async def scenario() -> tuple[int, int, list[int]]:
        writer = Writer(tmp_path / "w.db", group_commit=True, max_batch=64, busy_timeout_ms=5000)
        writer.start()
        try:
            await writer.submit(CREATE_TABLE)
            before = writer.commits  # a request's write was just committed: the writer is busy
            background = asyncio.ensure_future(writer.submit(INSERT_IN_BACKGROUND, 1))
            await asyncio.sleep(0.002)  # the background job is alone in the queue meanwhile
            request = await writer.submit(INSERT, 2)
            shared = writer.commits - before
            await background
            return shared, writer.commits - before, [request, background.result()]
        finally:
            writer.stop()

    shared, commits, results = asyncio.run(scenario())
    assert results == [2, 1]
    assert (shared, commits) == (1, 1)  # one commit carried both


def test_on_an_idle_writer_a_background_job_goes_alone(tmp_path: Path) -> None:
    async def scenario() -> int:
        writer = Writer(tmp_path / "w.db", group_commit=True, max_batch=64, busy_timeout_ms=5000)
        writer.start()
        try:
            await writer.submit(CREATE_TABLE_IN_BACKGROUND)
            before = writer.commits
            assert await writer.submit(INSERT_IN_BACKGROUND, 1) == 1
            return writer.commits - before
        finally:
            writer.stop()

    assert asyncio.run(scenario()) == 1
    assert sqlite_writer.BUSY_WINDOW_S > sqlite_writer.BACKGROUND_WAIT_S
