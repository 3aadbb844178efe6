"""``plantstore db copy``: a deployment carried between SQLite and PostgreSQL (both ways, and
PostgreSQL to PostgreSQL) serves on the target exactly as it did on the source.

The source is filled through a real server (operator tokens, a revoked one, a disabled user,
plants with gaps, a webhook subscription with undelivered events, a sandbox token), the copy
runs as its own process, and the target is checked table by table and then served.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import asyncpg
import httpx
import pytest

from plantstore.db.migrate import SCHEMA_HEAD, current_revision, upgrade
from tests import pg
from tests.fixtures.backends import require_postgres
from tests.fixtures.calls import bearer, run_cli, token_from_output
from tests.fixtures.servers import LiveServer, all_plants, start_server, stop_server

pytestmark = pytest.mark.server

SERVER_ENV = {
    "PLANTSTORE_SANDBOX": "true",
    "PLANTSTORE_WEBHOOK_ALLOW_PRIVATE": "true",
    "PLANTSTORE_TRUSTED_PROXIES": "127.0.0.1",
}
NOWHERE = "http://127.0.0.1:9/hook"  # nothing listens: the events stay undelivered


def table_rows(url: str) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table but Alembic's, sorted, booleans as 0 and 1."""
    if url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            names = [
                row[0]
                for row in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND name NOT LIKE 'sqlite_%' AND name != 'alembic_version'"
                )
            ]
            return {
                name: sorted(conn.execute(f"SELECT * FROM {name}").fetchall(), key=repr)
                for name in names
            }

    async def read() -> dict[str, list[tuple[object, ...]]]:
        conn = await asyncpg.connect(url)
        try:
            names = [
                row[0]
                for row in await conn.fetch(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                    "AND tablename != 'alembic_version'"
                )
            ]
            return {
                name: sorted(
                    (
                        tuple(int(v) if isinstance(v, bool) else v for v in row)
                        for row in await conn.fetch(f"SELECT * FROM {name}")
                    ),
                    key=repr,
                )
                for name in names
            }
        finally:
            await conn.close()

    return asyncio.run(read())


def copy(source: str, target: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "plantstore", "db", "copy", source, target, *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )


def fill(server: LiveServer) -> dict[str, str]:
    """A deployment with one of everything; returns the tokens by who holds them."""
    url = server.db_url
    tokens = {name: token_from_output(run_cli(url, "token", "create", name)) for name in "abcd"}
    run_cli(url, "token", "revoke", _token_id(url, "c"))
    run_cli(url, "user", "disable", "d")
    with server.client() as http:
        subscribed = http.post("/webhooks", json={"url": NOWHERE}, headers=bearer(tokens["a"]))
        assert subscribed.status_code == 200, subscribed.text
        for plant_id in range(1, 26):
            plant = {"id": plant_id, "name": f"fern {plant_id}", "tag": f"t{plant_id % 3}"}
            assert http.post("/plants", json=plant, headers=bearer(tokens["a"])).status_code == 200
        for plant_id in (3, 7):
            assert (
                http.delete(f"/plants/{plant_id}", headers=bearer(tokens["a"])).status_code == 204
            )
        for plant_id in (5, 2**62):
            plant = {"id": plant_id, "name": "cactus"}
            assert http.post("/plants", json=plant, headers=bearer(tokens["b"])).status_code == 200
        sandbox = http.post("/sandbox/tokens", headers={"X-Forwarded-For": "203.0.113.9"})
        assert sandbox.status_code == 200, sandbox.text
        tokens["sandbox"] = sandbox.json()["token"]
        plant = {"id": 1, "name": "basil"}
        assert (
            http.post("/plants", json=plant, headers=bearer(tokens["sandbox"])).status_code == 200
        )
    return tokens


def _token_id(url: str, user: str) -> str:
    listing = run_cli(url, "token", "list", user).splitlines()
    return listing[1].split()[0]


def database(kind: str, tmp_path: Path, name: str, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / f'{name}.db'}"
    return require_postgres(request.getfixturevalue("postgres_server")).create_database()


@pytest.mark.parametrize(
    ("source_kind", "target_kind"),
    [("sqlite", "postgresql"), ("postgresql", "sqlite"), ("postgresql", "postgresql")],
)
def test_a_copied_deployment_serves_as_the_source_did(
    source_kind: str, target_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    source = database(source_kind, tmp_path, "source", request)
    target = database(target_kind, tmp_path, "target", request)
    server = start_server(source, tmp_path / "source.log", **SERVER_ENV)
    try:
        tokens = fill(server)
        before = {who: all_plants(server, token) for who, token in tokens.items() if who in "ab"}
    finally:
        stop_server(server)

    copied = copy(source, target)
    assert copied.returncode == 0, copied.stderr
    assert "every count matches the source" in copied.stdout
    assert "plants" in copied.stdout
    assert "webhook_deliveries" in copied.stdout
    rows = table_rows(source)
    assert rows["webhook_deliveries"], "the fill left no undelivered event to carry"
    assert table_rows(target) == rows

    served = start_server(target, tmp_path / "target.log", **SERVER_ENV)
    try:
        with served.client() as http:
            for who in "ab":
                assert all_plants(served, tokens[who]) == before[who]
            alice = bearer(tokens["a"])
            again = {"id": 4, "name": "fern 4", "tag": "t1"}
            assert http.post("/plants", json=again, headers=alice).status_code == 200
            clash = {"id": 4, "name": "not the same"}
            assert http.post("/plants", json=clash, headers=alice).status_code == 409
            assert (
                http.post("/plants", json={"id": 3, "name": "new"}, headers=alice).status_code
                == 200
            )
            for refused in ("c", "d"):
                assert http.get("/plants", headers=bearer(tokens[refused])).status_code == 401
            assert http.get("/plants", headers=bearer(tokens["sandbox"])).json() == [
                {"name": "basil"}
            ]
            hooks = http.get("/webhooks", headers=alice)
            assert [hook["url"] for hook in hooks.json()] == [NOWHERE]
        new = token_from_output(run_cli(target, "token", "create", "e"))
        with served.client() as http:
            assert http.get("/plants", headers=bearer(new)).status_code == 200
        ids = [int(line.split()[0]) for line in run_cli(target, "token", "list").splitlines()[1:]]
        assert max(ids) > max(int(row[0]) for row in rows["tokens"])  # type: ignore[call-overload]
    finally:
        stop_server(served)


def test_a_target_holding_data_is_refused_and_left_unchanged(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    source = database("sqlite", tmp_path, "source", request)
    target = database("postgresql", tmp_path, "target", request)
    run_cli(source, "token", "create", "alice")
    run_cli(target, "token", "create", "bob")
    before = table_rows(target)
    refused = copy(source, target)
    assert refused.returncode != 0
    assert "already holds data" in refused.stderr
    assert "users 1" in refused.stderr
    assert "nothing was changed" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert table_rows(target) == before


def test_a_source_with_no_database_is_refused(tmp_path: Path) -> None:
    refused = copy(f"sqlite:///{tmp_path / 'none.db'}", f"sqlite:///{tmp_path / 'copy.db'}")
    assert refused.returncode != 0
    assert "holds no plantstore database" in refused.stderr
    assert not (tmp_path / "copy.db").exists()


def test_the_copy_reads_one_snapshot_while_the_source_serves(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Creates and deletes go on during the copy; every copied user's plant count still
    matches its plants, as it can only if every table was read at one moment."""
    source = database("sqlite", tmp_path, "source", request)
    target = database("postgresql", tmp_path, "target", request)
    server = start_server(source, tmp_path / "source.log")
    tokens = [token_from_output(run_cli(source, "token", "create", f"u{i}")) for i in range(4)]
    with contextlib.closing(sqlite3.connect(source.removeprefix("sqlite:///"))) as conn, conn:
        conn.executemany(
            "INSERT INTO plants (user_id, id, name) VALUES (?, ?, ?)",
            [(user, 10_000 + n, "seed") for user in (1, 2) for n in range(60_000)],
        )
    stop = threading.Event()
    answered: list[int] = []

    def write(token: str) -> None:
        with httpx.Client(base_url=server.base_url, timeout=10) as http:
            n = 0
            while not stop.is_set():
                n += 1
                created = http.post("/plants", json={"id": n, "name": "x"}, headers=bearer(token))
                answered.append(created.status_code)
                if n % 3 == 0:
                    http.delete(f"/plants/{n - 1}", headers=bearer(token))

    writers = [threading.Thread(target=write, args=(token,)) for token in tokens]
    try:
        for writer in writers:
            writer.start()
        copied = copy(source, target, "--batch-rows", "500")
    finally:
        stop.set()
        for writer in writers:
            writer.join()
        stop_server(server)
    assert copied.returncode == 0, copied.stderr
    assert answered
    assert set(answered) == {200}
    [users] = pg.run_sql(
        target,
        "SELECT u.id, u.plant_count, (SELECT count(*) FROM plants p WHERE p.user_id = u.id) "
        "FROM users u ORDER BY u.id",
    )
    assert all(counted == held for _, counted, held in users), users
    assert sum(held for _, _, held in users) > 120_000  # type: ignore[misc]


def test_a_source_at_an_older_revision_is_copied_at_it_and_upgrades_on_the_target(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    source = database("sqlite", tmp_path, "source", request)
    target = database("postgresql", tmp_path, "target", request)
    upgrade(source, "0008")
    with contextlib.closing(sqlite3.connect(source.removeprefix("sqlite:///"))) as conn, conn:
        conn.execute("INSERT INTO users (id, name, created_at) VALUES (7, 'old', 0)")
        conn.execute("INSERT INTO plants (user_id, id, name) VALUES (7, 1, 'kept')")
    copied = copy(source, target)
    assert copied.returncode == 0, copied.stderr
    assert "revision 0008" in copied.stdout
    assert current_revision(target) == "0008"
    token = token_from_output(run_cli(target, "token", "create", "old"))  # upgrades first
    assert current_revision(target) == SCHEMA_HEAD
    server = start_server(target, tmp_path / "target.log")
    try:
        assert all_plants(server, token) == [{"name": "kept"}]
    finally:
        stop_server(server)


def test_a_postgresql_database_that_does_not_exist_is_told_in_one_line(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    source = database("sqlite", tmp_path, "source", request)
    run_cli(source, "token", "create", "alice")
    existing = database("postgresql", tmp_path, "target", request)
    missing = existing.rsplit("/", 1)[0] + "/plantstore_never_created"
    for refused in (copy(source, missing), copy(missing, f"sqlite:///{tmp_path / 'copy.db'}")):
        assert refused.returncode == 1
        assert "Traceback" not in refused.stderr
        assert refused.stderr.strip().splitlines() == [
            'Error: cannot copy: InvalidCatalogNameError: database "plantstore_never_created" '
            "does not exist"
        ]
