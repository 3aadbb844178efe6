"""Sandbox mode against real servers on both backends: the token route exists only in the mode,
each token is a fresh user with its own quota (also on PostgreSQL's batched create path), the
issuance limit answers 429, and expired users are purged with all they own, in bounded steps,
by several processes at once."""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from plantstore.db.migrate import upgrade
from plantstore.settings import Settings, SettingsError, load_settings
from tests import pg
from tests.fixtures.backends import is_sqlite, new_database_url
from tests.fixtures.calls import assert_error, bearer
from tests.fixtures.servers import LiveServer, start_server, stop_server
from tests.stores import Stores

SANDBOX_ENV = {"PLANTSTORE_SANDBOX": "true", "PLANTSTORE_SANDBOX_ISSUE_LIMIT": "off"}


def rows(db_url: str, statement: str) -> list[tuple[object, ...]]:
    """Rows read straight from the database, behind the service's back."""
    if db_url.startswith("sqlite:///"):
        path = db_url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path, timeout=10)) as conn:
            return [tuple(row) for row in conn.execute(statement)]
    return pg.run_sql(db_url, statement)[0]


@contextlib.contextmanager
def serving(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, *args: str, **env: str
) -> Iterator[LiveServer]:
    db_url = new_database_url(backend, tmp_path, request)
    server = start_server(db_url, tmp_path / "server.log", *args, **env)
    try:
        yield server
    finally:
        stop_server(server)


def sandbox_token(http: httpx.Client) -> str:
    answer = http.post("/sandbox/tokens")
    assert answer.status_code == 200, answer.text
    token: str = answer.json()["token"]
    return token


def create(http: httpx.Client, token: str, plant_id: int) -> httpx.Response:
    return http.post(
        "/plants", json={"id": plant_id, "name": f"p{plant_id}"}, headers=bearer(token)
    )


@pytest.mark.server
def test_without_sandbox_mode_the_route_does_not_exist(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with serving(backend, tmp_path, request) as server, server.client() as http:
        assert_error(http.post("/sandbox/tokens"), 404)
        assert_error(http.get("/sandbox/tokens"), 404)
        assert "/sandbox/tokens" not in http.get("/openapi.json").json()["paths"]


@pytest.mark.server
def test_a_sandbox_token_is_a_fresh_user_with_its_own_quota_and_expiry(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env = {**SANDBOX_ENV, "PLANTSTORE_SANDBOX_MAX_PLANTS": "3", "PLANTSTORE_SANDBOX_TTL": "2h"}
    with serving(backend, tmp_path, request, **env) as server, server.client() as http:
        before = time.time()
        answer = http.post("/sandbox/tokens")
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/json"
        body = answer.json()
        assert set(body) == {"token", "expires_at"}
        assert re.fullmatch(r"pst_[A-Za-z0-9_-]{43}", body["token"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", body["expires_at"])
        expires = datetime.fromisoformat(body["expires_at"]).timestamp()
        assert before + 7200 - 2 <= expires <= time.time() + 7200

        first, second = body["token"], sandbox_token(http)
        for plant_id in (1, 2, 3):
            assert create(http, first, plant_id).status_code == 200
        assert_error(create(http, first, 4), 403, "quota", "hold 3 plants")  # its own, named
        assert create(http, first, 3).status_code == 200  # an identical repeat is still fine
        assert [p["name"] for p in http.get("/plants", headers=bearer(first)).json()] == [
            "p1",
            "p2",
            "p3",
        ]
        assert http.get("/plants", headers=bearer(second)).json() == []  # a user of its own
        # The operator's users keep the global quota (100,000 by default).
        for plant_id in range(1, 6):
            assert create(http, server.token, plant_id).status_code == 200
        assert_error(http.get("/sandbox/tokens"), 405)

    quotas = rows(server.db_url, "SELECT name, max_plants FROM users ORDER BY id")
    assert quotas[0] == ("default", None)
    assert [quota for _, quota in quotas[1:]] == [3, 3]
    assert all(str(name).startswith("sandbox-") for name, _ in quotas[1:])


@pytest.mark.server
def test_the_own_quota_holds_on_concurrent_creates(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """40 creates at once for a user allowed 10 (PostgreSQL writes them in shared batches)."""
    env = {**SANDBOX_ENV, "PLANTSTORE_SANDBOX_MAX_PLANTS": "10"}
    with serving(backend, tmp_path, request, **env) as server, server.client() as http:
        token = sandbox_token(http)

        async def burst() -> list[int]:
            async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
                answers = await asyncio.gather(
                    *(
                        client.post("/plants", json={"id": i, "name": "x"}, headers=bearer(token))
                        for i in range(40)
                    )
                )
            return [answer.status_code for answer in answers]

        statuses = asyncio.run(burst())
        assert sorted(set(statuses)) == [200, 403]
        assert statuses.count(200) == 10
        assert len(http.get("/plants", headers=bearer(token)).json()) == 10
    [(count,)] = rows(server.db_url, "SELECT plant_count FROM users WHERE max_plants = 10")
    assert count == 10


@pytest.mark.server
def test_the_issuance_limit_answers_429_with_retry_after(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env = {**SANDBOX_ENV, "PLANTSTORE_SANDBOX_ISSUE_LIMIT": "2/hour"}
    with serving(backend, tmp_path, request, **env) as server, server.client() as http:
        sandbox_token(http)
        sandbox_token(http)
        refused = http.post("/sandbox/tokens")
        assert_error(refused, 429, "sandbox tokens")
        assert 1 <= int(refused.headers["retry-after"]) <= 3600
    users = rows(server.db_url, "SELECT count(*) FROM users WHERE sandbox_expires_at IS NOT NULL")
    assert users == [(2,)]  # the refused request created nobody


@pytest.mark.server
def test_the_issuance_limit_is_shared_through_redis(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two instances on one database and one Redis spend one budget per address."""
    db_url = new_database_url("sqlite", tmp_path, request)
    env = {
        **SANDBOX_ENV,
        "PLANTSTORE_SANDBOX_ISSUE_LIMIT": "3/hour",
        "PLANTSTORE_REDIS_URL": "redis://127.0.0.1:6379",
        "PLANTSTORE_TRUSTED_PROXIES": "127.0.0.1",
    }
    # Redis outlives this run: a client address of its own keeps earlier runs' counts out.
    visitor = {"X-Forwarded-For": f"2001:db8::{secrets.token_hex(2)}:{secrets.token_hex(2)}"}
    first = start_server(db_url, tmp_path / "first.log", **env)
    second = start_server(db_url, tmp_path / "second.log", **env)
    try:
        with first.client() as one, second.client() as two:
            statuses = [
                http.post("/sandbox/tokens", headers=visitor).status_code
                for http in (one, two, one, two)
            ]
            assert statuses == [200, 200, 200, 429]
            other = {"X-Forwarded-For": f"2001:db8::{secrets.token_hex(2)}:{secrets.token_hex(2)}"}
            assert one.post("/sandbox/tokens", headers=other).status_code == 200  # its own
    finally:
        stop_server(first)
        stop_server(second)


@pytest.mark.server
def test_an_expired_sandbox_user_is_purged_with_all_it_owns(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env = {**SANDBOX_ENV, "PLANTSTORE_SANDBOX_TTL": "3s"}
    with serving(backend, tmp_path, request, **env) as server, server.client() as http:
        token = sandbox_token(http)
        for plant_id in range(1, 6):
            assert create(http, token, plant_id).status_code == 200
        assert create(http, server.token, 1).status_code == 200
        assert rows(server.db_url, "SELECT count(*) FROM plants") == [(6,)]
        deadline = time.monotonic() + 30
        while rows(server.db_url, "SELECT count(*) FROM users") != [(1,)]:
            assert time.monotonic() < deadline, server.log_path.read_text()[-2000:]
            time.sleep(0.2)
        assert_error(http.get("/plants", headers=bearer(token)), 401)
        assert http.get("/plants", headers=bearer(server.token)).json() == [{"name": "p1"}]
        # The line comes once the purge has looked for more and found none: wait for it, or
        # a stop in between would find it unwritten (as CI did once).
        while "sandbox purge deleted 7 rows" not in server.log_path.read_text():
            assert time.monotonic() < deadline, server.log_path.read_text()[-2000:]
            time.sleep(0.2)
    assert rows(server.db_url, "SELECT count(*) FROM plants") == [(1,)]
    assert rows(server.db_url, "SELECT count(*) FROM tokens") == [(1,)]


@pytest.mark.server
def test_sandbox_users_still_expire_once_the_mode_is_turned_off(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Tokens issued while the mode was on expire, and their users are purged, after a restart
    without it."""
    db_url = new_database_url(backend, tmp_path, request)
    env = {**SANDBOX_ENV, "PLANTSTORE_SANDBOX_TTL": "3s"}
    server = start_server(db_url, tmp_path / "on.log", **env)
    try:
        with server.client() as http:
            token = sandbox_token(http)
            assert create(http, token, 1).status_code == 200
    finally:
        stop_server(server)
    server = start_server(db_url, tmp_path / "off.log", PLANTSTORE_SANDBOX_TTL="3s")
    try:
        with server.client() as http:
            assert_error(http.post("/sandbox/tokens"), 404)
            deadline = time.monotonic() + 30
            while rows(db_url, "SELECT count(*) FROM plants") != [(0,)]:
                assert time.monotonic() < deadline, server.log_path.read_text()[-2000:]
                time.sleep(0.2)
            assert_error(http.get("/plants", headers=bearer(token)), 401)
    finally:
        stop_server(server)
    assert rows(db_url, "SELECT count(*) FROM users WHERE sandbox_expires_at IS NOT NULL") == [(0,)]


def seed_expired(db_url: str, users: int, plants: int) -> None:
    """``users`` sandbox users expired an hour ago with ``plants`` plants each, written
    directly, and one operator user with one plant."""
    if is_sqlite_url(db_url):
        path = db_url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            conn.execute("BEGIN")
            conn.execute("INSERT INTO users (id, name, created_at) VALUES (1, 'keep', 0)")
            conn.execute("INSERT INTO plants (user_id, id, name) VALUES (1, 1, 'kept')")
            for user in range(2, users + 2):
                conn.execute(
                    "INSERT INTO users (id, name, created_at, max_plants, sandbox_expires_at) "
                    "VALUES (?, ?, 0, 100, ?)",
                    (user, f"sandbox-{user}", time.time() - 3600),
                )
                conn.execute(
                    "INSERT INTO tokens (user_id, token_hash, created_at) VALUES (?, ?, 0)",
                    (user, f"{user:064x}"),
                )
                conn.executemany(
                    "INSERT INTO plants (user_id, id, name) VALUES (?, ?, 'x')",
                    [(user, plant) for plant in range(plants)],
                )
            conn.execute("COMMIT")
        return
    pg.run_sql(
        db_url,
        "INSERT INTO users (id, name, created_at) VALUES (1, 'keep', 0)",
        "INSERT INTO plants (user_id, id, name) VALUES (1, 1, 'kept')",
        "INSERT INTO users (id, name, created_at, max_plants, sandbox_expires_at) "
        f"SELECT u, 'sandbox-' || u, 0, 100, extract(epoch FROM now()) - 3600 "
        f"FROM generate_series(2, {users + 1}) u",
        "INSERT INTO tokens (user_id, token_hash, created_at) "
        f"SELECT u, lpad(to_hex(u), 64, '0'), 0 FROM generate_series(2, {users + 1}) u",
        "INSERT INTO plants (user_id, id, name) "
        f"SELECT u, p, 'x' FROM generate_series(2, {users + 1}) u, generate_series(0, {plants - 1}) p",
    )


def is_sqlite_url(db_url: str) -> bool:
    return db_url.startswith("sqlite:///")


def test_each_purge_step_deletes_at_most_its_rows(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Steps of 50 rows through the store: 30 users of 7 plants (270 rows) take 6 steps."""
    assert is_sqlite(backend) or backend == "postgres"
    db_url = new_database_url(backend, tmp_path, request)
    upgrade(db_url)
    seed_expired(db_url, users=30, plants=7)

    async def purge() -> list[int]:
        store = Stores(Settings(database_url=db_url))
        await store.open()
        try:
            steps = []
            while (step := await store.sandbox.purge_expired_users(time.time(), 50))[0]:
                steps.append(step[0])
            return steps
        finally:
            await store.close()

    steps = asyncio.run(purge())
    assert max(steps) <= 50
    assert sum(steps) == 30 * (7 + 1 + 1)
    assert len(steps) == 6
    assert rows(db_url, "SELECT id FROM users") == [(1,)]
    assert rows(db_url, "SELECT user_id, id, name FROM plants") == [(1, 1, "kept")]
    assert rows(db_url, "SELECT count(*) FROM tokens") == [(0,)]
    assert rows(db_url, "SELECT plant_count FROM users") == [(1,)]


def test_a_purge_spanning_steps_queues_no_delete_events(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """An expired user whose purge takes several steps had each step's plant deletes queue
    plant.deleted deliveries, committed and sent before a later step cascaded them away; its
    subscriptions go first instead, so no step queues anything."""
    db_url = new_database_url(backend, tmp_path, request)
    upgrade(db_url)
    seed_expired(db_url, users=1, plants=100)  # user 2: more than one step of 60 rows
    statement = (
        "INSERT INTO webhook_subscriptions (user_id, url, events, secret, enabled, created_at) "
        "VALUES (2, 'https://hooks.example.com/', 3, 'whsec_x', true, 0)"
    )
    if is_sqlite_url(db_url):
        path = db_url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
            conn.execute(statement)
    else:
        pg.run_sql(db_url, statement)

    async def first_step() -> int:
        store = Stores(Settings(database_url=db_url))
        await store.open()
        try:
            deleted, _ = await store.sandbox.purge_expired_users(time.time(), 60)
            return deleted
        finally:
            await store.close()

    assert asyncio.run(first_step()) == 60  # the subscription and 59 plants
    assert rows(db_url, "SELECT count(*) FROM plants WHERE user_id = 2") == [(41,)]
    assert rows(db_url, "SELECT count(*) FROM webhook_subscriptions") == [(0,)]
    assert rows(db_url, "SELECT count(*) FROM webhook_deliveries") == [(0,)]


def test_several_processes_purge_side_by_side(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Four stores (each a process's) purge one database at once: every expired user goes,
    nobody else, and none of them fails."""
    db_url = new_database_url(backend, tmp_path, request)
    upgrade(db_url)
    seed_expired(db_url, users=200, plants=20)

    def purge_in_own_loop() -> int:
        async def purge() -> int:
            store = Stores(Settings(database_url=db_url, busy_timeout_ms=60_000))
            await store.open()
            try:
                total = 0
                while (step := await store.sandbox.purge_expired_users(time.time(), 100))[0]:
                    total += step[0]
                return total
            finally:
                await store.close()

        return asyncio.run(purge())

    with ThreadPoolExecutor(4) as pool:
        totals = list(pool.map(lambda _: purge_in_own_loop(), range(4)))
    assert sum(totals) == 200 * (20 + 1 + 1)  # each row deleted once, by one of them
    assert rows(db_url, "SELECT id FROM users") == [(1,)]
    assert rows(db_url, "SELECT count(*) FROM plants") == [(1,)]


@pytest.mark.parametrize(
    ("name", "value", "named"),
    [
        ("public_url", "ftp://api.example.org", "PLANTSTORE_PUBLIC_URL"),
        ("public_url", "api.example.org", "PLANTSTORE_PUBLIC_URL"),
        ("sandbox_ttl", "1 hour", "PLANTSTORE_SANDBOX_TTL"),
        ("sandbox_ttl", "0s", "PLANTSTORE_SANDBOX_TTL"),
        ("sandbox_max_plants", "0", "PLANTSTORE_SANDBOX_MAX_PLANTS"),
        ("sandbox_issue_limit", "lots", "PLANTSTORE_SANDBOX_ISSUE_LIMIT"),
    ],
)
def test_bad_sandbox_settings_stop_the_program_naming_the_setting(
    name: str, value: str, named: str
) -> None:
    with pytest.raises(SettingsError, match=named):
        load_settings(**{name: value})


def test_good_sandbox_settings_are_read() -> None:
    settings = load_settings(
        public_url="https://api.example.org/plants", sandbox="true", sandbox_ttl="15m"
    )
    assert settings.sandbox
    assert settings.sandbox_ttl_seconds == 900
    assert load_settings().sandbox_ttl_seconds == 3600
    assert not load_settings().sandbox
