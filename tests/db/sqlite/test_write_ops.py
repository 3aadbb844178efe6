"""Writes are declared operations, sent between processes by name: a closure, a lambda or a
plain function is refused in a single process as it would be on another worker, a name is
declared once, and the owner of the writer finds a write by its name, importing its module
if it must, and then by its number on the connection."""

from __future__ import annotations

import asyncio
import math
import os
import socket
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from plantstore.db.migrate import upgrade
from plantstore.db.sqlite import locks_file
from plantstore.db.sqlite.machine_writer import writer_address
from plantstore.db.sqlite.ops import WriteOp, find
from plantstore.db.sqlite.wire import Frames, frame
from plantstore.db.sqlite.writer import Writer
from tests.db.sqlite.one_writer import machine_writer


def plus_one(conn: sqlite3.Connection, value: int) -> int:
    return value + 1


def minus_one(conn: sqlite3.Connection, value: int) -> int:
    return value - 1


def times_two(conn: sqlite3.Connection, value: int) -> int:
    return value * 2


PLUS_ONE = WriteOp(plus_one)
MINUS_ONE = WriteOp(minus_one, one_write=True)
TIMES_TWO = WriteOp(times_two, background=True)
LAZY = "tests.db.sqlite.lazy_write"


def test_a_closure_or_a_lambda_is_no_write() -> None:
    offset = 1

    def closure(conn: sqlite3.Connection) -> int:
        return offset

    class Store:
        def method(self, conn: sqlite3.Connection) -> None:
            pass

    candidates: list[Any] = [closure, lambda conn: None, Store().method, Store.method]
    for fn in candidates:
        with pytest.raises(TypeError, match="module-level function"):
            WriteOp(fn)


def test_a_write_is_declared_once() -> None:
    with pytest.raises(ValueError, match="declared already"):
        WriteOp(plus_one)
    assert find(PLUS_ONE.name) is PLUS_ONE
    assert PLUS_ONE.name == f"{__name__}:plus_one"


def test_a_single_process_refuses_what_another_worker_could_not_run(tmp_path: Path) -> None:
    """A function, a closure or keywords fail here as they would once relayed."""
    db = tmp_path / "one.db"
    upgrade(f"sqlite:///{db}")
    offset = 1

    def closure(conn: sqlite3.Connection) -> int:
        return offset

    async def scenario() -> None:
        database = machine_writer(db)
        await database.open()
        try:
            writer = database.writer
            assert writer.engine is not None  # alone: it owns the writer
            undeclared: Any = closure  # what a type checker would refuse
            with pytest.raises(TypeError, match="not a declared write"):
                await writer.submit(undeclared)
            with pytest.raises(TypeError, match="not a declared write"):
                await writer.engine.submit(plus_one, 1)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="not a declared write"):
                writer.submit_nowait(undeclared)
            keywords: Any = {"value": 1}
            with pytest.raises(TypeError, match="by position"):
                await writer.submit(PLUS_ONE, **keywords)
            assert await writer.submit(PLUS_ONE, 41) == 42
            assert await writer.submit(MINUS_ONE, 43) == 42
        finally:
            await database.close()

    asyncio.run(scenario())


def test_another_process_writes_by_name_then_by_number(tmp_path: Path) -> None:
    db = tmp_path / "machine.db"
    upgrade(f"sqlite:///{db}")

    async def scenario() -> list[int]:
        owning, other = machine_writer(db), machine_writer(db)
        await owning.open()
        await other.open()  # the same file from the same user: it sends its writes to owning
        try:
            assert other.writer.engine is None
            unsendable: Any = threading.Lock()
            with pytest.raises(TypeError, match="pickle"):  # its name was not sent: nor noted
                await other.writer.submit(PLUS_ONE, unsendable)
            sent = [
                other.writer.submit(PLUS_ONE, 1),
                other.writer.submit(MINUS_ONE, 3),
                other.writer.submit(TIMES_TWO, 2),
            ]
            answers = list(await asyncio.gather(*sent))
            answers.append(await other.writer.submit(PLUS_ONE, 4))
            answers.append(await other.writer.submit(MINUS_ONE, 6))
            return answers
        finally:
            await other.close()
            await owning.close()

    assert asyncio.run(scenario()) == [2, 2, 4, 5, 5]


def test_the_owner_imports_the_module_a_name_is_in_and_refuses_an_unknown_one(
    tmp_path: Path,
) -> None:
    db = tmp_path / "machine.db"
    upgrade(f"sqlite:///{db}")
    assert LAZY not in sys.modules  # declared nowhere in this process yet

    def exchange(address: str, messages: list[object], answers: int) -> list[Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(address)
            sock.sendall(b"".join(frame(message) for message in messages))
            frames, got = Frames(), list[Any]()
            while len(got) < answers:
                for message in frames.feed(sock.recv(65536)):
                    got.extend(message)
            return got

    async def scenario() -> list[Any]:
        database = machine_writer(db)
        await database.open()
        try:
            lock = os.open(locks_file.path_of(db), os.O_RDONLY)
            address = writer_address(lock)
            os.close(lock)
            messages: list[object] = [
                (1, f"{LAZY}:twice", (21,), math.inf),
                (2, "tests.db.sqlite.nowhere:nothing", (), math.inf),
                (3, 0, (5,), math.inf),  # the first name sent on this connection
                (4, 1, (), math.inf),  # the second: unknown still
            ]
            return await asyncio.to_thread(exchange, address, messages, 4)
        finally:
            await database.close()

    answers = sorted(asyncio.run(scenario()), key=lambda answer: answer[0])
    assert LAZY in sys.modules
    assert [(number, result) for number, result, _ in answers] == [
        (1, 42),
        (2, None),
        (3, 10),
        (4, None),
    ]
    assert answers[0][2] is None
    assert answers[2][2] is None
    for _, _, error in (answers[1], answers[3]):
        assert isinstance(error, RuntimeError)
        assert "no write named" in str(error)


def test_writer_submit_takes_a_declared_write(tmp_path: Path) -> None:
    async def scenario() -> int:
        writer = Writer(tmp_path / "w.db", group_commit=True, max_batch=8, busy_timeout_ms=5000)
        writer.start()
        try:
            return await writer.submit(PLUS_ONE, 1)
        finally:
            writer.stop()

    assert asyncio.run(scenario()) == 2
