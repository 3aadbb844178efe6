"""``plantstore db backup``: a copy of a live SQLite database taken under write load holds
every acknowledged write, passes ``integrity_check`` and serves once restored as
docs/operating.md says; PostgreSQL is refused with the way to back it up."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from plantstore.cli import main
from tests.fixtures.backends import run_sql
from tests.fixtures.calls import bearer, run_cli, token_from_output
from tests.fixtures.servers import (
    LiveServer,
    all_plants,
    start_server,
    stop_server,
)

WRITERS = 4  # client threads creating plants during the backup
SEEDED = 50_000  # plants already stored, so the backup reads a database of some size


def create_plants(
    server: LiveServer, token: str, first_id: int, stop: threading.Event, acked: list[int]
) -> None:
    """Create plants first_id, first_id + WRITERS, ... until told to stop; record each 200."""
    plant_id = first_id
    with server.client() as http:
        while not stop.is_set():
            plant_id += WRITERS
            response = http.post(
                "/plants",
                json={"id": plant_id, "name": f"p{plant_id}"},
                headers=bearer(token),
            )
            assert response.status_code == 200, response.text
            acked.append(plant_id)  # list.append is atomic: the list is the order of answers


def seed(db_url: str) -> None:
    """SEEDED plants of the default user with negative ids (the load uses positive ones)."""
    run_sql(
        db_url,
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < "
        f"{SEEDED}) INSERT INTO plants (user_id, id, name, tag) "
        "SELECT (SELECT id FROM users WHERE name = 'default'), -i, 'seeded', 'old' FROM n",
    )


def copied_ids(path: Path) -> set[int]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        [check] = conn.execute("PRAGMA integrity_check").fetchall()
        assert check == ("ok",)
        counted = conn.execute("SELECT plant_count FROM users WHERE name = 'default'").fetchone()
        ids = {row[0] for row in conn.execute("SELECT id FROM plants")}
    assert counted == (len(ids),), "the users' plant counts must agree with the plants copied"
    return ids


@pytest.mark.server
def test_backup_under_write_load_holds_every_acknowledged_write(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'live.db'}"
    token = token_from_output(run_cli(db_url, "token", "create", "default"))
    seed(db_url)  # before the server starts: the load's writes stay in the WAL a while
    server = start_server(db_url, tmp_path / "live.log")
    try:
        backup_under_load_then_restore(server, token, tmp_path)
    finally:
        stop_server(server)  # a no-op once the test has stopped it itself


def backup_under_load_then_restore(server: LiveServer, token: str, tmp_path: Path) -> None:
    db_url = server.db_url
    backup = tmp_path / "backups" / "plantstore.db"
    backup.parent.mkdir()
    stop = threading.Event()
    acked: list[int] = []
    writers = [
        threading.Thread(target=create_plants, args=(server, token, first, stop, acked))
        for first in range(WRITERS)
    ]
    try:
        for writer in writers:
            writer.start()
        while len(acked) < 50:  # the load is under way
            assert all(writer.is_alive() for writer in writers)
            time.sleep(0.01)
        acked_before = set(acked)
        # In-process, so the copy starts within milliseconds: a plain file copy would then
        # miss the writes still in the WAL (a checkpoint in between could hide that).
        code, output = backup_command(db_url, backup)
        acked_during = len(acked) - len(acked_before)
        assert code == 0, output
    finally:
        stop.set()
        for writer in writers:
            writer.join(timeout=30)
    print(f"{len(acked_before)} creates acknowledged before the backup, {acked_during} during it")
    assert all(not writer.is_alive() for writer in writers)
    assert len(acked) > len(acked_before), "the server kept acknowledging writes"

    ids = copied_ids(backup)
    assert acked_before <= ids, "a write acknowledged before the backup began is missing"
    assert set(range(-SEEDED, 0)) <= ids
    assert ids <= set(range(-SEEDED, 0)) | set(acked), "the copy holds a write never acknowledged"
    assert "integrity ok" in output

    # Restore as docs/operating.md says: refused while the server runs; stopped, restored.
    refused = CliRunner().invoke(main, ["--database", db_url, "db", "restore", str(backup)])
    assert refused.exit_code == 1
    assert "stop it first" in refused.output
    stop_server(server)
    restore = CliRunner().invoke(main, ["--database", db_url, "db", "restore", str(backup)])
    assert restore.exit_code == 0, restore.output
    assert "integrity ok" in restore.output
    live = tmp_path / "live.db"
    assert not live.with_name("live.db-wal").exists()
    assert not live.with_name("live.db-shm").exists()
    assert list(tmp_path.glob("live.db.before-restore-*")), "the old database is kept"
    restored = start_server(db_url, tmp_path / "restored.log")
    try:
        plants = all_plants(restored, token)  # the token is in the copy too
        assert len(plants) == len(ids)
        assert sum(plant["name"] != "seeded" for plant in plants) == len(ids) - SEEDED
        with restored.client() as http:
            created = http.post("/plants", json={"id": 0, "name": "after"}, headers=bearer(token))
        assert created.status_code == 200, created.text
    finally:
        stop_server(restored)


def backup_command(db_url: str, target: Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--database", db_url, "db", "backup", str(target)])
    return result.exit_code, result.output


def test_backup_refuses_postgresql_and_names_its_tools(tmp_path: Path) -> None:
    url = "postgresql://plantstore:hunter2@127.0.0.1:1/plantstore"
    code, output = backup_command(url, tmp_path / "copy.db")
    assert code == 1
    assert "pg_dump" in output
    assert "pg_restore" in output
    assert "hunter2" not in output
    assert not (tmp_path / "copy.db").exists()


def test_backup_never_overwrites_and_never_creates_a_database(tmp_path: Path) -> None:
    source = tmp_path / "plantstore.db"
    code, output = backup_command(f"sqlite:///{source}", tmp_path / "copy.db")
    assert code == 1
    assert f"no SQLite database at {source}" in output
    assert not source.exists()
    issued = CliRunner().invoke(main, ["--database", f"sqlite:///{source}", "token", "create", "a"])
    assert issued.exit_code == 0
    existing = tmp_path / "existing.db"
    existing.write_bytes(b"keep me")
    code, output = backup_command(f"sqlite:///{source}", existing)
    assert code == 1
    assert "already exists" in output
    assert existing.read_bytes() == b"keep me"
    code, output = backup_command(f"sqlite:///{source}", tmp_path / "copy.db")
    assert code == 0, output
    assert "users 1, plants 0, integrity ok" in output
    assert sorted(path.name for path in tmp_path.iterdir() if "copy" in path.name) == ["copy.db"]


def test_a_restored_backup_is_read_by_the_cli_too(tmp_path: Path) -> None:
    """The copy is an ordinary plantstore database: the token commands work on it as is."""
    source = f"sqlite:///{tmp_path / 'plantstore.db'}"
    assert (
        CliRunner().invoke(main, ["--database", source, "token", "create", "carol"]).exit_code == 0
    )
    assert backup_command(source, tmp_path / "copy.db")[0] == 0
    listed = CliRunner().invoke(
        main, ["--database", f"sqlite:///{tmp_path / 'copy.db'}", "token", "list"]
    )
    assert listed.exit_code == 0
    assert "carol" in listed.output


@pytest.mark.server
def test_the_file_a_restore_sets_aside_is_the_way_back_and_git_ignores_it(tmp_path: Path) -> None:
    """As docs/operating.md says of ``<db>.before-restore-<UTC>``: restored like a backup, it
    brings back what the restore replaced. It and a ``.replaced-`` WAL are ignored by git."""
    database = tmp_path / "plantstore.db"
    url = f"sqlite:///{database}"

    def cli(*args: str) -> str:
        result = CliRunner().invoke(main, ["--database", url, *args])
        assert result.exit_code == 0, result.output
        return result.output

    cli("token", "create", "carol")
    assert backup_command(url, tmp_path / "copy.db")[0] == 0
    cli("token", "create", "dave")
    cli("db", "restore", str(tmp_path / "copy.db"))
    assert "dave" not in cli("user", "list")
    [kept] = tmp_path.glob("plantstore.db.before-restore-*")
    cli("db", "restore", str(kept))
    assert "dave" in cli("user", "list")
    repository = Path(__file__).parents[3]
    names = [f"data/{kept.name}", "data/plantstore.db.replaced-20261123T174500Z-wal"]
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *names],
        cwd=repository,
        capture_output=True,
        text=True,
    )
    assert ignored.stdout.split() == names
