"""PostgreSQL for the tests: the server named by PLANTSTORE_TEST_POSTGRES_URL, or a throwaway
cluster started from the local binaries (initdb, pg_ctl) on a free port.

Databases made here are named after the run's own database (or ``plantstore_test``), so one
run never touches another's; they are dropped when the run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from plantstore.db.migrate import upgrade

URL_VARIABLE = "PLANTSTORE_TEST_POSTGRES_URL"
REQUIRE_VARIABLE = "PLANTSTORE_TEST_REQUIRE_POSTGRES"


def run_sql(url: str, *statements: str) -> list[list[tuple[object, ...]]]:
    """Run statements on ``url`` outside any transaction; return each one's rows."""

    async def run() -> list[list[tuple[object, ...]]]:
        connection = await asyncpg.connect(url, timeout=10)
        try:
            return [
                [tuple(row) for row in await connection.fetch(statement)]
                for statement in statements
            ]
        finally:
            await connection.close()

    return asyncio.run(run())


def generic_plan(url: str, statement: str, arguments: str) -> str:
    """The plan PostgreSQL keeps for ``statement`` once it stops planning each call (generic,
    blind to the values), as EXPLAIN prints it; ``arguments`` fill the parameters, in SQL."""
    rows = run_sql(
        url,
        "SET plan_cache_mode = force_generic_plan",
        f"PREPARE statement AS {statement}",
        f"EXPLAIN EXECUTE statement ({arguments})",
    )[2]
    return "\n".join(str(line) for (line,) in rows)


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


def database_of(url: str) -> str:
    return urlsplit(url).path.lstrip("/") or "postgres"


class PostgresServer:
    """A server the tests may create databases on."""

    def __init__(self, admin_url: str, prefix: str) -> None:
        self.admin_url = admin_url
        self._prefix = prefix
        self._made: list[str] = []
        self._template: str | None = None

    def create_database(self) -> str:
        """Create an empty database and return its URL."""
        name = f"{self._prefix}_{uuid.uuid4().hex[:10]}"
        run_sql(self.admin_url, f'CREATE DATABASE "{name}"')
        self._made.append(name)
        return with_database(self.admin_url, name)

    def create_migrated_database(self) -> str:
        """A database migrated to head: a copy of this process's template (``CREATE DATABASE
        ... TEMPLATE`` takes ~70 ms where the migrations take ~600)."""
        if self._template is None:
            url = self.create_database()
            upgrade(url)
            self._template = database_of(url)
        name = f"{self._prefix}_{uuid.uuid4().hex[:10]}"
        run_sql(self.admin_url, f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"')
        self._made.append(name)
        return with_database(self.admin_url, name)

    def drop_all(self) -> None:
        for name in self._made:
            with contextlib.suppress(asyncpg.PostgresError, OSError):
                run_sql(self.admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._made.clear()
        self._template = None


def postgres_binaries() -> Path | None:
    """The directory holding initdb and pg_ctl, newest version first, if any."""
    found = shutil.which("pg_ctl")
    if found:  # where it really lies, beside pg_basebackup (a link on PATH may be alone)
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    return Path(candidates[0]).parent if candidates else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThrowawayCluster:
    """A PostgreSQL cluster of our own in a temporary directory, which a test may stop.

    PostgreSQL refuses to run as root, so under root the cluster belongs to the
    ``postgres`` system user.
    """

    def __init__(self, binaries: Path, *settings: str) -> None:
        self._bin = binaries
        self._settings = settings
        self.directory = Path(tempfile.mkdtemp(prefix="plantstore-pg-"))
        self.data = self.directory / "data"
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._run_as: list[str] = []
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.directory, owner.pw_uid, owner.pw_gid)
            self._run_as = ["runuser", "-u", "postgres", "--"]

    def _run(self, *command: str) -> None:
        subprocess.run(
            [*self._run_as, *command],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.directory,  # one the postgres user may enter, unlike a root-only clone
        )

    def configure(self, **settings: str) -> None:
        """Append ``name = 'value'`` lines to the cluster's postgresql.conf (the last wins)."""
        lines = "".join(f"{name} = '{value}'\n" for name, value in settings.items())
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(lines)

    def copy_as_standby_of(self, primary: ThrowawayCluster) -> ThrowawayCluster:
        """Fill this (uninitialised) cluster with ``pg_basebackup -R`` of ``primary``: a
        streaming standby of it."""
        self._run(
            str(self._bin / "pg_basebackup"),
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            "postgres",
            "-D",
            str(self.data),
            "-R",
            "-X",
            "stream",
        )
        return self

    def promote(self) -> None:
        self._run(str(self._bin / "pg_ctl"), "promote", "-w", "-D", str(self.data))

    def init(self) -> ThrowawayCluster:
        self._run(
            str(self._bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-instructions",
        )
        return self

    def start(self) -> None:
        options = " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.directory}",
                *(f"-c {setting}" for setting in self._settings),
            ]
        )
        log = self.directory / "server.log"
        self._run(
            str(self._bin / "pg_ctl"),
            "start",
            "-w",
            "-D",
            str(self.data),
            "-l",
            str(log),
            "-o",
            options,
        )

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self._bin / "pg_ctl"), "stop", "-w", "-D", str(self.data), "-m", mode)

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self.stop("immediate")
        shutil.rmtree(self.directory, ignore_errors=True)


@contextlib.contextmanager
def throwaway_cluster(*settings: str) -> Iterator[ThrowawayCluster]:
    """Start a cluster with extra ``name=value`` settings; remove it afterwards."""
    binaries = postgres_binaries()
    if binaries is None:
        raise RuntimeError("no PostgreSQL binaries (initdb, pg_ctl) on this machine")
    cluster = ThrowawayCluster(binaries, *settings).init()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.remove()


@contextlib.contextmanager
def primary_and_synchronous_standby() -> Iterator[tuple[ThrowawayCluster, ThrowawayCluster]]:
    """A primary whose every commit waits until its standby has flushed it, and that standby
    (streaming, hot, promotable: once promoted it waits for no one)."""
    binaries = postgres_binaries()
    if binaries is None:
        raise RuntimeError("no PostgreSQL binaries (initdb, pg_ctl, pg_basebackup) here")
    primary = ThrowawayCluster(binaries).init()
    standby = ThrowawayCluster(binaries)
    try:
        primary.configure(wal_level="replica", max_wal_senders="4", synchronous_standby_names="*")
        primary.start()
        standby.copy_as_standby_of(primary)
        standby.configure(synchronous_standby_names="", hot_standby="on")
        standby.start()
        deadline = time.monotonic() + 30
        while run_sql(primary.url, "SELECT sync_state FROM pg_stat_replication") != [[("sync",)]]:
            if time.monotonic() > deadline:
                raise RuntimeError("the standby never became synchronous")
            time.sleep(0.1)
        yield primary, standby
    finally:
        standby.remove()
        primary.remove()
