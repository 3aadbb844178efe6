"""Several instances on one PostgreSQL database behave as one service.

Two ``plantstore serve`` processes (or one with ``--workers 2``) share plants, agree on which
racing create wins, refuse a revoked token within a second, and migrate a fresh database once
even when they start at the same moment.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import httpx
import pytest

from plantstore.db.migrate import head_revision
from tests import pg
from tests.fixtures.calls import assert_error, bearer, run_cli, token_from_output
from tests.fixtures.servers import (
    LiveServer,
    child_pids,
    free_port,
    start_server,
    stop_server,
    wait_for_started_workers,
)

pytestmark = pytest.mark.server

RACERS = 16  # half through each instance
ROUNDS = 5  # each round races afresh on a new id: any one race may happen to serialise
TOKEN_ID = re.compile(r"Token (\d+) for user")
WORKER_SPAWNED = re.compile(r"Spawning worker-\d+ with PID: (\d+)")


@dataclass
class Pair:
    """Two servers on one database, one shared client each, and the 'default' user's token."""

    db_url: str
    token: str
    servers: tuple[LiveServer, LiveServer]
    clients: tuple[httpx.Client, httpx.Client]


@pytest.fixture
def pair(postgres: pg.PostgresServer, tmp_path: Path) -> Iterator[Pair]:
    """Start one server (which issues the first token), then a second on the same database."""
    db_url = postgres.create_database()
    with contextlib.ExitStack() as stack:
        first = start_server(db_url, tmp_path / "first.log")
        stack.callback(stop_server, first)
        second = start_server(db_url, tmp_path / "second.log")
        stack.callback(stop_server, second)
        assert first.token, first.log_path.read_text()
        assert second.token == "", "only the first start issues a token"
        clients = (stack.enter_context(first.client()), stack.enter_context(second.client()))
        yield Pair(db_url, first.token, (first, second), clients)


def race(calls: list[Callable[[], httpx.Response]]) -> list[httpx.Response]:
    """Run every call on its own thread, all released at once by a barrier."""
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], httpx.Response]) -> httpx.Response:
        barrier.wait(timeout=30)
        return call()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))


def spread(
    clients: tuple[httpx.Client, httpx.Client], bodies: list[dict[str, object]], token: str
) -> list[Callable[[], httpx.Response]]:
    """One create per body, alternating between the two instances."""
    return [
        partial(clients[index % 2].post, "/plants", json=body, headers=bearer(token))
        for index, body in enumerate(bodies)
    ]


def warm_up(pair: Pair) -> None:
    """Open the racers' connections and cache the token, so the race is in the create path."""
    calls: list[Callable[[], httpx.Response]] = [
        partial(pair.clients[index % 2].get, "/plants?limit=0", headers=bearer(pair.token))
        for index in range(RACERS)
    ]
    assert [response.status_code for response in race(calls)] == [200] * RACERS


def listed(http: httpx.Client, token: str) -> list[dict[str, str]]:
    response = http.get("/plants", headers=bearer(token))
    assert response.status_code == 200, response.text
    plants: list[dict[str, str]] = response.json()
    return plants


def alembic_versions(db_url: str) -> list[object]:
    [rows] = pg.run_sql(db_url, "SELECT version_num FROM alembic_version")
    return [row[0] for row in rows]


# --- two instances, one database ---------------------------------------------------------------


def test_a_plant_made_through_one_instance_is_listed_and_deleted_through_the_other(
    pair: Pair,
) -> None:
    first, second = pair.clients
    headers = bearer(pair.token)
    created = first.post(
        "/plants", json={"id": 7, "name": "Monstera", "tag": "big"}, headers=headers
    )
    assert created.status_code == 200, created.text
    assert listed(second, pair.token) == [{"name": "Monstera", "tag": "big"}]
    assert second.delete("/plants/7", headers=headers).status_code == 204
    assert listed(first, pair.token) == []
    assert listed(second, pair.token) == []
    assert_error(first.delete("/plants/7", headers=headers), 404)


def test_racing_creates_of_one_id_with_different_names_have_one_winner(pair: Pair) -> None:
    warm_up(pair)
    winners: list[str] = []
    for plant_id in range(1, ROUNDS + 1):
        names = [f"racer-{plant_id}-{index}" for index in range(RACERS)]
        bodies: list[dict[str, object]] = [{"id": plant_id, "name": name} for name in names]
        responses = race(spread(pair.clients, bodies, pair.token))
        statuses = Counter(response.status_code for response in responses)
        assert statuses == {200: 1, 409: RACERS - 1}, statuses
        [winner] = [name for name, r in zip(names, responses, strict=True) if r.status_code == 200]
        assert [r.json() for r in responses if r.status_code == 200] == [{"name": winner}]
        for response in responses:
            if response.status_code == 409:
                assert_error(response, 409)
        winners.append(winner)
    expected = [{"name": winner} for winner in winners]  # ids 1..ROUNDS, listed by id
    assert listed(pair.clients[0], pair.token) == expected
    assert listed(pair.clients[1], pair.token) == expected


def test_racing_identical_creates_all_succeed_and_store_one_plant(pair: Pair) -> None:
    warm_up(pair)
    for plant_id in range(1, ROUNDS + 1):
        plant = {"name": f"Twin {plant_id}", "tag": "same"}
        responses = race(spread(pair.clients, [{"id": plant_id, **plant}] * RACERS, pair.token))
        assert [(r.status_code, r.json()) for r in responses] == [(200, plant)] * RACERS
        [[(count,)]] = pg.run_sql(pair.db_url, f"SELECT count(*) FROM plants WHERE id = {plant_id}")
        assert count == 1
    expected = [{"name": f"Twin {plant_id}", "tag": "same"} for plant_id in range(1, ROUNDS + 1)]
    assert listed(pair.clients[0], pair.token) == expected
    assert listed(pair.clients[1], pair.token) == expected


@dataclass
class Refusal:
    """The first answer that was not 200, and when its request left and its answer came,
    in seconds since the revoke returned."""

    sent: float
    answered: float
    response: httpx.Response


def poll_until_refused(http: httpx.Client, headers: dict[str, str], since: float) -> Refusal:
    """Ask back to back until the answer is not 200, or 5 s have passed."""
    while True:
        sent = time.monotonic() - since
        response = http.get("/plants", headers=headers)
        answered = time.monotonic() - since
        if response.status_code != 200 or answered > 5.0:
            return Refusal(sent, answered, response)


def test_a_revoked_token_is_refused_by_both_instances_within_one_second(pair: Pair) -> None:
    issued = run_cli(pair.db_url, "token", "create", "revoke-me")
    token = token_from_output(issued)
    match = TOKEN_ID.search(issued)
    assert match is not None, issued
    headers = bearer(token)
    for http in pair.clients:
        created = http.post("/plants", json={"id": 1, "name": "Ivy"}, headers=headers)
        assert created.status_code == 200, created.text  # the second is an identical repeat
        assert listed(http, token) == [{"name": "Ivy"}]  # and now cached on this instance
    run_cli(pair.db_url, "token", "revoke", match.group(1))
    revoked_at = time.monotonic()
    polls = [partial(poll_until_refused, http, headers, revoked_at) for http in pair.clients]
    with ThreadPoolExecutor(max_workers=2) as pool:  # neither instance's latency delays the other
        refusals = list(pool.map(lambda poll: poll(), polls))
    for refusal in refusals:
        assert_error(refusal.response, 401)
        assert 'error="invalid_token"' in refusal.response.headers["www-authenticate"]
    # The first refused request was sent this long after the revoke returned; its answer
    # came a round trip later, which is the machine's latency, not the service's promise.
    sent = [round(refusal.sent, 3) for refusal in refusals]
    answered = [round(refusal.answered, 3) for refusal in refusals]
    assert max(sent) <= 1.0, f"first refused requests sent after {sent} s (answered {answered} s)"
    for http in pair.clients:  # and it stays refused
        assert_error(http.get("/plants", headers=headers), 401)


# --- starting together on a fresh database -------------------------------------------------------


def launch(db_url: str, log_path: Path) -> LiveServer:
    """Start ``plantstore serve`` on a free port without waiting for it (token still unknown)."""
    port = free_port()
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "plantstore", "serve", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PLANTSTORE_DATABASE_URL": db_url},
            text=True,
            start_new_session=True,
        )
    return LiveServer(process, f"http://127.0.0.1:{port}", db_url, "", log_path)


def wait_until_serving(server: LiveServer) -> LiveServer:
    """Wait for /healthz, then read the token it printed, if any; fail with its log if it
    exits or takes over 30 s."""
    deadline = time.monotonic() + 30
    while server.process.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{server.base_url}/healthz", timeout=1).status_code == 200:
                words = server.log_path.read_text().split()
                token = next((word for word in words if word.startswith("pst_")), "")
                return replace(server, token=token)
        time.sleep(0.05)
    pytest.fail(f"plantstore serve did not come up: {server.log_path.read_text()}")


def test_two_instances_started_together_on_a_fresh_database_both_serve(
    postgres: pg.PostgresServer, tmp_path: Path
) -> None:
    db_url = postgres.create_database()
    launched = [launch(db_url, tmp_path / name) for name in ("first.log", "second.log")]
    try:
        servers = [wait_until_serving(server) for server in launched]
        assert alembic_versions(db_url) == [head_revision()]
        tokens = [server.token for server in servers if server.token]
        assert len(tokens) == 1, f"the first token must be issued exactly once: {tokens}"
        assert pg.run_sql(db_url, "SELECT count(*) FROM tokens") == [[(1,)]]
        with servers[0].client() as first, servers[1].client() as second:
            for token in tokens:  # whichever start issued it, both instances accept it
                assert listed(first, token) == listed(second, token) == []
            created = first.post(
                "/plants", json={"id": 1, "name": "Fern"}, headers=bearer(tokens[0])
            )
            assert created.status_code == 200, created.text
            assert listed(second, tokens[0]) == [{"name": "Fern"}]
    finally:
        for server in launched:
            stop_server(server)
    for server in launched:
        assert "Traceback" not in server.log_path.read_text(), server.log_path.read_text()


def test_concurrent_db_upgrades_on_a_fresh_database_all_succeed_once(
    postgres: pg.PostgresServer,
) -> None:
    db_url = postgres.create_database()
    command = [sys.executable, "-m", "plantstore", "--database", db_url, "db", "upgrade"]
    processes = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    results = [(process.wait(timeout=120), *process.communicate()) for process in processes]
    for returncode, stdout, stderr in results:
        assert returncode == 0, stderr
        assert "newest schema revision" in stdout
    assert alembic_versions(db_url) == [head_revision()]
    secrets, [(plants,)] = pg.run_sql(
        db_url, "SELECT name FROM secrets ORDER BY name", "SELECT count(*) FROM plants"
    )
    assert secrets == [("cursor_key",), ("sandbox_address_key",)]  # each made once
    assert plants == 0


# --- one server, several worker processes --------------------------------------------------------


def plantstore_connections(db_url: str) -> int:
    [[(count,)]] = pg.run_sql(
        db_url,
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name = 'plantstore'",
    )
    assert isinstance(count, int)
    return count


def test_serve_with_two_workers_runs_two_processes_that_serve(
    postgres: pg.PostgresServer, tmp_path: Path
) -> None:
    db_url = postgres.create_database()
    server = start_server(db_url, tmp_path / "server.log", "--workers", "2")
    try:
        # /healthz answers once one worker is up; give the other a moment to finish starting
        deadline = time.monotonic() + 15
        while True:
            spawned = {int(pid) for pid in WORKER_SPAWNED.findall(server.log_path.read_text())}
            connections = plantstore_connections(db_url)
            if (len(spawned) == 2 and connections >= 2) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert len(spawned) == 2, server.log_path.read_text()
        assert child_pids(server.process.pid) == spawned
        # each worker opened its own store (a pool of at least one connection) at start
        assert connections >= 2
        headers = bearer(server.token)
        with server.client() as http:
            calls: list[Callable[[], httpx.Response]] = [
                partial(http.post, "/plants", json={"id": n, "name": f"p{n}"}, headers=headers)
                for n in range(64)
            ]
            with ThreadPoolExecutor(max_workers=8) as pool:
                statuses = [response.status_code for response in pool.map(lambda c: c(), calls)]
            assert statuses == [200] * 64
            assert listed(http, server.token) == [{"name": f"p{n}"} for n in range(64)]
        assert child_pids(server.process.pid) == spawned, "a worker died while serving"
    finally:
        stop_server(server)


# SQLite serves --workers N too: tests/db/sqlite/test_sqlite_workers.py holds its workers to every
# promise made above for instances. A worker count out of range (0, 65) stops serve with one
# line naming PLANTSTORE_WORKERS: tests/cli/test_cli.py::test_a_bad_setting_stops_with_one_line.


def test_the_shipped_default_is_one_worker_per_core(tmp_path: Path) -> None:
    """No PLANTSTORE_WORKERS at all: one worker per core this process may run on, at most 8
    (the README's default; the tests' own servers are held to one by QUIET_SERVER_ENV)."""
    cores = len(os.sched_getaffinity(0))
    expected = max(1, min(8, cores))
    server = start_server(
        f"sqlite:///{tmp_path / 'default.db'}",
        tmp_path / "server.log",
        unset=("PLANTSTORE_WORKERS",),
    )
    try:
        wait_for_started_workers(server, expected)
        workers = child_pids(server.process.pid)
        spawned = {int(pid) for pid in WORKER_SPAWNED.findall(server.log_path.read_text())}
        with server.client() as http:
            answer = http.get("/plants", headers=bearer(server.token))
    finally:
        stop_server(server)
    assert len(workers) == expected, f"{len(workers)} workers on {cores} cores: {workers}"
    assert workers == spawned, server.log_path.read_text()
    assert answer.status_code == 200, answer.text
