"""A real PgBouncer in front of a PostgreSQL server, on a free port, in one pool mode: started
as the ``postgres`` user (PgBouncer refuses root), trust auth, every database passed through;
stopped and its files removed at the end.

Two builds: Debian bookworm's package (1.18, ``apt install pgbouncer``), which drops prepared
statements between transactions, and 1.24 built from Debian's source by
``tools/build-pgbouncer`` into the virtualenv, which keeps them (``max_prepared_statements``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

BINARY = "/usr/sbin/pgbouncer"
KEEPING_BINARY = Path(__file__).resolve().parents[1] / ".venv" / "pgbouncer" / "bin" / "pgbouncer"
KEPT_STATEMENTS = 200  # max_prepared_statements: above asyncpg's cache of 100 a connection


def installed() -> bool:
    return Path(BINARY).exists()


def keeping_installed() -> bool:
    """Whether the build that keeps prepared statements is there (tools/build-pgbouncer)."""
    return KEEPING_BINARY.exists()


@contextmanager
def pgbouncer(server_url: str, mode: str, *, keep_prepared: bool = False) -> Iterator[str]:
    """Yield ``server_url`` as seen through a PgBouncer in pool ``mode``: Debian's package, or
    with ``keep_prepared`` the 1.24 build with ``max_prepared_statements`` set."""
    parts = urlsplit(server_url)
    port = _free_port()
    directory = Path(tempfile.mkdtemp(prefix="plantstore-pgbouncer-"))
    (directory / "users.txt").write_text(f'"{parts.username or "postgres"}" ""\n')
    (directory / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={parts.hostname} port={parts.port or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {directory}/users.txt\n"
        f"admin_users = {parts.username or 'postgres'}\n"
        f"pool_mode = {mode}\ndefault_pool_size = 20\nmax_client_conn = 500\n"
        f"logfile = {directory}/pgbouncer.log\n"
        + (f"max_prepared_statements = {KEPT_STATEMENTS}\n" if keep_prepared else "")
    )
    binary = str(KEEPING_BINARY if keep_prepared else BINARY)
    as_postgres: list[str] = []
    if os.geteuid() == 0:
        if keep_prepared:  # the checkout may lie where only root may enter (/root): a copy
            binary = shutil.copy2(KEEPING_BINARY, str(directory / "pgbouncer"))
        user = pwd.getpwnam("postgres")
        os.chown(directory, user.pw_uid, user.pw_gid)
        for child in directory.iterdir():
            os.chown(child, user.pw_uid, user.pw_gid)
        as_postgres = ["runuser", "-u", "postgres", "--"]
    process = subprocess.Popen(
        [*as_postgres, str(binary), str(directory / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        cwd=directory,  # one the postgres user may enter, unlike a root-only checkout
    )
    try:
        _wait_for(port, process, directory)
        yield urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{port}"))
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


def admin(url: str, command: str) -> str:
    """Run ``command`` on PgBouncer's admin console (the ``pgbouncer`` database) with psql,
    which speaks the simple query protocol the console wants."""
    return _console(url, "-Atc", command)


def stats(url: str) -> dict[str, int]:
    """``SHOW STATS`` for the database ``url`` names: its totals by column name (from 1.21
    they count the Parse and Bind messages clients sent, ``total_client_parse_count`` and
    ``total_bind_count``)."""
    lines = _console(url, "-AF", "|", "-P", "footer=off", "-c", "SHOW STATS").splitlines()
    names, database = lines[0].split("|"), urlsplit(url).path.lstrip("/")
    for line in lines[1:]:
        values = line.split("|")
        if values[0] == database:
            return {name: int(value) for name, value in zip(names[1:], values[1:], strict=True)}
    raise LookupError(f"PgBouncer has no statistics for {database}")


def hold_statement_timeout(server_url: str, milliseconds: int = 2000) -> None:
    """Give the role of ``server_url`` (straight to PostgreSQL), in its database, the
    server-side statement timeout the service needs behind a pooler: twice its own default
    second (src/plantstore/db/postgres/pooling.py). Server connections a PgBouncer already
    holds keep the settings they started with: ``RECONNECT`` on its console renews them."""
    change = (
        "DO $$ BEGIN EXECUTE format('ALTER ROLE CURRENT_USER IN DATABASE %I "
        f"SET statement_timeout = %L', current_database(), '{milliseconds}ms'); END $$"
    )
    subprocess.run(["psql", server_url, "-qc", change], capture_output=True, check=True)


def _console(url: str, *arguments: str) -> str:
    """psql's output for ``arguments`` on the admin console of the PgBouncer ``url`` names."""
    console = urlunsplit(urlsplit(url)._replace(path="/pgbouncer"))
    return subprocess.run(
        ["psql", console, *arguments], capture_output=True, text=True, check=True
    ).stdout


def _wait_for(port: int, process: subprocess.Popen[bytes], directory: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = directory / "pgbouncer.log"
            raise RuntimeError(f"pgbouncer exited: {log.read_text() if log.exists() else ''}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("pgbouncer did not listen within 10 s")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
