"""The fault suite (``python -m trials.faults``, trials/faults/), bounded for CI: each fault of
the environment staged for real, once, with short holds, under a running ``plantstore serve``
and its create load, and every target of the contract asserted on its own.

Staging needs root (loop devices, mount, fsfreeze, sysfs), e2fsprogs, util-linux and the
PostgreSQL binaries, as in CI. A fault that cannot be staged here fails with the reason: it
is never skipped. These tests take no ``backend``: each starts its own servers (on SQLite,
or on a throwaway PostgreSQL cluster shared by the module), so each runs once.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from plantstore.db.sqlite.connection import connect
from plantstore.db.sqlite.ops import WriteOp
from plantstore.db.sqlite.writer import Writer
from trials.faults import config, ext4, report, suite

# Loop devices are the machine's: the tests that attach them run one at a time, on one worker.
pytestmark = [pytest.mark.root, pytest.mark.server, pytest.mark.xdist_group("loop-devices")]

SECONDS = 2.0  # each fault held (a freeze: three write deadlines, 6 s)


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[suite.Suite]:
    settings = config.FaultConfig(
        workdir=tmp_path_factory.mktemp("faults"),
        seconds=SECONDS,
        warmup=1.0,
        after=2.0,
        progress=print,
    )
    with suite.Suite(settings) as running:
        yield running


def test_the_suite_is_imported_from_the_repository_root() -> None:
    assert suite.__name__ == "trials.faults.suite"
    assert Path(suite.__file__).parent.parent.name == "trials"


def _make_table(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS t (x)")


def _insert(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO t VALUES (1)")


MAKE_TABLE = WriteOp(_make_table)
INSERT = WriteOp(_insert)


@pytest.mark.timeout(60)
def test_a_read_after_a_commit_goes_on_while_the_disk_is_frozen(tmp_path: Path) -> None:
    """The first read of a commit must not have to write its read mark into ``-shm``: on a
    frozen file system that write waits for the thaw, and it would be an event loop's."""
    fs = ext4.LoopFs(tmp_path, 32)
    fs.setup()
    database = fs.mount / "plants.db"
    writer = Writer(database, group_commit=True, max_batch=8, busy_timeout_ms=1000)
    try:
        writer.start()
        reader = connect(database, 1000)
        asyncio.run(writer.submit(MAKE_TABLE))
        assert reader.execute("SELECT count(*) FROM t").fetchone() == (0,)
        asyncio.run(writer.submit(INSERT))  # committed; no reader has seen it yet
        fs.freeze()
        counted: list[int] = []
        done = threading.Event()

        def count() -> None:
            counted.append(reader.execute("SELECT count(*) FROM t").fetchone()[0])
            done.set()

        threading.Thread(target=count, daemon=True).start()
        finished_frozen = done.wait(2)
        fs.thaw()
        assert finished_frozen, "a read of the last commit waited for the frozen disk"
        assert counted == [1]
        reader.close()
    finally:
        if fs.frozen:
            fs.thaw()
        writer.stop()  # before the unmount, which an open file would refuse
        fs.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fault", config.FAULTS)
def test_fault(faults: suite.Suite, fault: str) -> None:
    verdict = faults.run(fault)
    print(report.table([verdict]))
    print(verdict.findings())
    expect(verdict, "staged")  # first: a fault that did not happen proves nothing
    expect(verdict, "healthy before")
    expect(verdict, "no 5xx but 503 with Retry-After")
    expect(verdict, "every request answered")
    expect(verdict, "every answer within")
    expect(verdict, "nothing acknowledged lost")
    if fault in config.BLOCKS_WRITES:
        expect(verdict, "/readyz 503 within", may_not_apply=True)
    expect(verdict, "/readyz 200 within")
    expect(verdict, "/healthz 200 throughout")
    expect(verdict, "writing again within")
    expect(verdict, f"at most {config.MAX_LOG_LINES} log lines")
    if verdict.result.backend == "sqlite":
        expect(verdict, "integrity_check ok")
    for target in verdict.result.extra:  # the fault's own: the void, the second serve's
        expect(verdict, target.name)
    assert verdict.passed, verdict.findings()  # no target left unasserted


def expect(verdict: suite.Verdict, name: str, *, may_not_apply: bool = False) -> None:
    """Assert one target, naming the fault, the target and what was seen; the other failed
    targets follow in the message (pytest stops at the first)."""
    target = verdict.target(name)
    assert target is not None, f"{verdict.name}: no target {name!r} was judged"
    if target.passed is None:
        assert may_not_apply, f"{verdict.name}: {target.line}"
        return
    others = [t.line for t in verdict.failed if t is not target]
    assert target.passed, f"{verdict.name}: {target.line}" + "".join(
        f"\n  also {line}" for line in others
    )
