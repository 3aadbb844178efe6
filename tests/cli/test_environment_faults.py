"""Every command that touches the database meets trouble with the files under it (permission
denied, a read-only file system, no such directory, a full disk, a ``<database>-locks`` file
that cannot be opened) with one ``Error:`` line naming the trouble, never a traceback.

The suite runs as root, whom file permissions do not stop, so the faults are staged with
what binds root too: a tmpfs mounted read-only or too small, an immutable (``chattr +i``)
file or directory, a path under /proc. Without the privilege to stage them the tests skip.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from plantstore.cli import main
from tests.fixtures.calls import run_cli
from tests.fixtures.servers import free_port

pytestmark = pytest.mark.server

Stage = Callable[[Path], contextlib.AbstractContextManager[str]]

# Each command, with {db}: the database URL, {spare}: a path in a healthy directory.
COMMANDS = {
    "token create": "token create alice",
    "token list": "token list",
    "token revoke": "token revoke 1",
    "user list": "user list",
    "user disable": "user disable alice",
    "user enable": "user enable alice",
    "webhook list": "webhook list",
    "webhook disable": "webhook disable 1",
    "webhook enable": "webhook enable 1",
    "webhook rotate-secret": "webhook rotate-secret 1",
    "db upgrade": "db upgrade",
    "db backup": "db backup {spare}/backup.db",
    "db restore": "db restore {spare}/restorable.db",
    "db copy": "db copy {db} sqlite:///{spare}/copy.db",
}
# These never open the database's writer: a bad -locks file is no trouble of theirs (on a
# database at the newest schema, which needs no migration and so no lock).
WRITER_FREE = {"db upgrade", "db backup", "db copy"}
# These word most of their failures themselves (db/sqlite/backup.py, restore.py, db/copy/):
# only one line is asked of them, and the trouble named where the root command words it.
WORDED_BY_THEM = {"db backup", "db restore", "db copy"}


def _command(name: str, db_url: str, spare: Path) -> list[str]:
    return ["--database", db_url, *COMMANDS[name].format(db=db_url, spare=spare).split()]


def _root(*command: str) -> None:
    """Run a staging command; skip the test if this machine does not let us."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot stage the fault (root needed): {' '.join(command)}: {done.stderr}")


@contextlib.contextmanager
def _tmpfs(directory: Path, size: str = "2m") -> Iterator[Path]:
    directory.mkdir(parents=True)
    _root("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory))
    try:
        yield directory
    finally:
        if subprocess.run(["umount", str(directory)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(directory)], check=False)  # still open here


@contextlib.contextmanager
def _immutable(path: Path) -> Iterator[Path]:
    _root("chattr", "+i", str(path))
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def _served_database(directory: Path) -> str:
    """A database with a user and a token, as serving leaves it (its -locks file too)."""
    url = f"sqlite:///{directory / 'plantstore.db'}"
    run_cli(url, "token", "create", "alice")
    return url


@contextlib.contextmanager
def read_only(tmp_path: Path) -> Iterator[str]:
    with _tmpfs(tmp_path / "ro") as directory:
        url = _served_database(directory)
        _root("mount", "-o", "remount,ro", str(directory))
        yield url


@contextlib.contextmanager
def read_only_fresh(tmp_path: Path) -> Iterator[str]:
    with _tmpfs(tmp_path / "ro") as directory:
        _root("mount", "-o", "remount,ro", str(directory))
        yield f"sqlite:///{directory / 'plantstore.db'}"


@contextlib.contextmanager
def immutable_directory(tmp_path: Path) -> Iterator[str]:
    directory = tmp_path / "locked"
    directory.mkdir(parents=True)
    url = _served_database(directory)
    with _immutable(directory):
        yield url


@contextlib.contextmanager
def missing_directory(tmp_path: Path) -> Iterator[str]:
    yield "sqlite:////proc/no-such-directory/plantstore.db"  # not even root can make it


@contextlib.contextmanager
def full_disk(tmp_path: Path) -> Iterator[str]:
    with _tmpfs(tmp_path / "full", size="512k") as directory:
        url = _served_database(directory)
        _fill(directory)
        yield url


@contextlib.contextmanager
def full_disk_fresh(tmp_path: Path) -> Iterator[str]:
    with _tmpfs(tmp_path / "full", size="64k") as directory:
        _fill(directory)
        yield f"sqlite:///{directory / 'plantstore.db'}"


def _fill(directory: Path) -> None:
    with contextlib.suppress(OSError), (directory / "filler").open("wb", buffering=0) as filler:
        while True:
            filler.write(b"\0" * 4096)  # until ENOSPC


@contextlib.contextmanager
def locks_is_a_directory(tmp_path: Path) -> Iterator[str]:
    url = _served_database(tmp_path)
    locks = tmp_path / "plantstore.db-locks"
    locks.unlink()
    locks.mkdir()
    yield url


@contextlib.contextmanager
def locks_lead_to_a_read_only_mount(tmp_path: Path) -> Iterator[str]:
    url = _served_database(tmp_path)
    with _tmpfs(tmp_path / "ro") as elsewhere:
        _root("mount", "-o", "remount,ro", str(elsewhere))
        locks = tmp_path / "plantstore.db-locks"
        locks.unlink()
        locks.symlink_to(elsewhere / "locks")  # dangling: opening it would create it there
        yield url


@contextlib.contextmanager
def locks_are_immutable(tmp_path: Path) -> Iterator[str]:
    url = _served_database(tmp_path)
    with _immutable(tmp_path / "plantstore.db-locks"):
        yield url


# Each staging and what the line must name.
FAULTS: dict[str, tuple[Stage, str]] = {
    "read-only": (read_only, "read-only file system"),
    "read-only-fresh": (read_only_fresh, "read-only file system"),
    "permission-denied": (immutable_directory, "permission denied"),
    "missing-directory": (missing_directory, "no such directory"),
    "disk-full": (full_disk, "disk full"),
    "disk-full-fresh": (full_disk_fresh, "disk full"),
    "locks-directory": (locks_is_a_directory, "is a directory"),
    "locks-read-only": (locks_lead_to_a_read_only_mount, "read-only file system"),
    "locks-permission-denied": (locks_are_immutable, "permission denied"),
}
LOCKS_FAULTS = {"locks-directory", "locks-read-only", "locks-permission-denied"}


def assert_one_error_line(result: Result) -> str:
    """No traceback (printed, or raised past click), and the last line is ``Error: ...``."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output, result.output
    assert result.exit_code != 0, result.output
    last = result.output.rstrip("\n").splitlines()[-1]
    assert last.startswith("Error: "), result.output
    return last


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_fault_of_the_files_is_one_error_line(tmp_path: Path, fault: str, command: str) -> None:
    stage, trouble = FAULTS[fault]
    spare = tmp_path / "spare"
    spare.mkdir()
    if command == "db restore":
        run_cli(_served_database(spare), "db", "backup", str(spare / "restorable.db"))
    with stage(tmp_path / "db") as db_url:
        result = CliRunner().invoke(main, _command(command, db_url, spare))
    if fault in LOCKS_FAULTS and command in WRITER_FREE:
        assert result.exit_code == 0, result.output  # the locks' file is not theirs to open
        return
    last = assert_one_error_line(result)
    if command not in WORDED_BY_THEM:
        assert last.startswith("Error: cannot open the database: "), last
        assert trouble in last, last
    elif command == "db restore" and (fault in LOCKS_FAULTS or fault.startswith("read-only")):
        assert trouble in last, last  # its lock in the -locks file: an OSError, worded here


def _real_command(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m plantstore``, for what only a real process shows (what reaches stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "plantstore", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize("fault", ["locks-directory", "locks-read-only", "read-only"])
def test_token_create_in_a_real_process_prints_one_line(tmp_path: Path, fault: str) -> None:
    stage, trouble = FAULTS[fault]
    with stage(tmp_path / "db") as db_url:
        result = _real_command("--database", db_url, "token", "create", "alice")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("Error: cannot open the database: "), line
    assert trouble in line
    assert "plantstore.db" in line  # the path, for the operator to go and look


@pytest.mark.parametrize("fault", ["locks-directory", "read-only", "disk-full"])
def test_serve_stops_with_one_line(tmp_path: Path, fault: str) -> None:
    stage, trouble = FAULTS[fault]
    with stage(tmp_path / "db") as db_url:
        port = str(free_port())
        result = _real_command("--database", db_url, "serve", "--port", port, timeout=30)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    last = result.stderr.rstrip("\n").splitlines()[-1]
    assert last.startswith("Error: cannot open the database: "), result.stderr
    assert trouble in last
