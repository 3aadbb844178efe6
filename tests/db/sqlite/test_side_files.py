"""Beside a SQLite database, plantstore keeps one file of its own (``<database>-locks``: its
writers' shared numbers and every lock they take), besides SQLite's ``-wal`` and ``-shm``:
while ``serve --workers 2`` writes, after it stops, and after the commands that migrate and
write."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from plantstore.db.sqlite import locks_file
from tests.fixtures.calls import bearer, run_cli
from tests.fixtures.servers import start_workers, stop_server

pytestmark = pytest.mark.server

SQLITES_OWN = ("-wal", "-shm")


def others_beside(db: Path) -> list[str]:
    """The names in the database's directory that are neither it nor SQLite's own files."""
    theirs = {db.name, *(f"{db.name}{suffix}" for suffix in SQLITES_OWN)}
    return sorted(path.name for path in db.parent.iterdir() if path.name not in theirs)


def test_one_file_of_ours_beside_the_database(tmp_path: Path) -> None:
    directory = tmp_path / "data"
    directory.mkdir()
    db = directory / "plantstore.db"
    url = f"sqlite:///{db}"
    run_cli(url, "db", "upgrade")
    assert others_beside(db) == [locks_file.path_of(db).name]

    server = start_workers(url, tmp_path / "serve.log", 2)
    try:
        with httpx.Client(base_url=server.base_url, timeout=10) as http:
            for plant_id in range(1, 21):
                response = http.post(
                    "/plants",
                    json={"id": plant_id, "name": f"p{plant_id}"},
                    headers={**bearer(server.token), "Connection": "close"},  # any worker
                )
                assert response.status_code == 200, response.text
        serving = others_beside(db)
    finally:
        stop_server(server)
    assert serving == [locks_file.path_of(db).name]
    assert others_beside(db) == [locks_file.path_of(db).name]

    run_cli(url, "token", "create", "bob")
    run_cli(url, "db", "upgrade")
    assert others_beside(db) == [locks_file.path_of(db).name]
    assert locks_file.writer_pid(db) is None  # nothing owns the writer once all stopped
