"""A throwaway PostgreSQL cluster for the PostgreSQL faults: ``initdb`` into a temporary
directory, run as the ``postgres`` user when we are root (PostgreSQL refuses root), on a free
port, ``fsync=on`` (the service refuses to run without it). Each fault gets a fresh database
on it; the faults stop, restart and cut it with ``pg_ctl`` and ``pg_terminate_backend``."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from .config import StagingError
from .server import free_port


def binaries() -> Path:
    """The directory holding initdb, pg_ctl and psql, newest version first."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    if not candidates:
        raise StagingError("no PostgreSQL binaries (pg_ctl) on PATH or in /usr/lib/postgresql")
    return Path(candidates[0]).parent


class Cluster:
    def __init__(self) -> None:
        self.bin = binaries()
        self.directory = Path(tempfile.mkdtemp(prefix="plantstore-faults-pg-"))
        self.data = self.directory / "data"
        self.log = self.directory / "postgres.log"
        self.port = free_port()
        self.run_as: list[str] = []
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                raise StagingError("running as root, but there is no postgres user") from None
            os.chown(self.directory, owner.pw_uid, owner.pw_gid)
            self.run_as = ["runuser", "-u", "postgres", "--"]
        self.running = False

    @property
    def options(self) -> str:
        return (
            f"-p {self.port} -c listen_addresses=127.0.0.1 "
            f"-c unix_socket_directories={self.directory} -c fsync=on -c synchronous_commit=on"
        )

    def pg_ctl(self, *arguments: str, timeout: float = 120) -> str:
        command = [*self.run_as, str(self.bin / "pg_ctl"), *arguments, "-D", str(self.data)]
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            cwd=self.directory,  # one the postgres user may enter, unlike a root-only checkout
        )
        if result.returncode != 0:
            raise StagingError(
                f"pg_ctl {' '.join(arguments)} failed ({result.returncode}): "
                f"{(result.stderr or result.stdout).strip()[-500:]}"
            )
        return result.stdout.strip()

    def init(self) -> None:
        result = subprocess.run(
            [
                *self.run_as,
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-instructions",
            ],
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
            cwd=self.directory,
        )
        if result.returncode != 0:
            raise StagingError(f"initdb failed: {result.stderr.strip()[-500:]}")
        self.start()

    def start(self) -> str:
        # -l: the server's output to a file, not to our pipe (pg_ctl would keep it open).
        out = self.pg_ctl("start", "-w", "-l", str(self.log), "-o", self.options)
        self.running = True
        return out

    def stop(self, mode: str) -> str:
        out = self.pg_ctl("stop", "-w", "-m", mode)
        self.running = False
        return out

    def restart(self, mode: str) -> str:
        return self.pg_ctl("restart", "-w", "-m", mode, "-l", str(self.log), "-o", self.options)

    def postmaster_pid(self) -> int:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().split()[0])
        return 0

    def sql(self, statement: str, database: str = "postgres") -> str:
        """One statement through psql over TCP (trust); its unaligned output."""
        result = subprocess.run(
            [
                str(self.bin / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                database,
                "-X",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                statement,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
        if result.returncode != 0:
            raise StagingError(f"psql {statement!r}: {result.stderr.strip()[-300:]}")
        return result.stdout.strip()

    def ready(self) -> bool:
        result = subprocess.run(
            [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-t", "1"],
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
        )
        return result.returncode == 0

    def create_database(self) -> str:
        name = f"plantstore_faults_{uuid.uuid4().hex[:8]}"
        self.sql(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def terminate_service(self) -> int:
        """End every connection of the service; how many there were."""
        return int(
            self.sql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'plantstore'"
            )
            or 0
        )

    def remove(self) -> None:
        if self.data.exists():
            with contextlib.suppress(StagingError, subprocess.TimeoutExpired):
                self.pg_ctl("stop", "-w", "-m", "immediate", timeout=30)
        self.running = False
        shutil.rmtree(self.directory, ignore_errors=True)
