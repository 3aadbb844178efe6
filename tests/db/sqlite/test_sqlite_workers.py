"""SQLite on several workers: ``plantstore serve --workers 2`` runs two processes,
each with its own store on one file, each committing its own writes and sharing the fsync.
Every promise that leaned on one process holds across them: a revoked token is refused everywhere within a second, the
first token is issued once, the per-user quota is exact, cursors work on either worker, the
workers spend one rate budget, no request
fails with "database is locked" (past the lock bound the answer is a 503 with Retry-After,
counted in the metrics), and a SIGTERM under load keeps every acknowledged write.

Requests go on a new connection each (the clients keep none alive), so the kernel hands them
to either worker. Which one answered is read from the answer's X-Request-ID: a generated id
is the answering process's random 12-digit prefix and a count (plantstore/ops/observe.py).
Every test checks that both workers answered: a pass from one would prove nothing about two.
The metrics summed across SQLite workers are in tests/ops/test_observability.py, the contract
suite against two workers is the ``[sqlite-2workers]`` backend (tests/conftest.py), and the
SIGKILL torture with two workers is in tests/e2e/test_torture.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from plantstore.db.migrate import current_revision, head_revision
from tests.cli.test_shutdown import EXIT_BOUND, USERS, Traffic, refuses_connections, wait_exit
from tests.fixtures.calls import (
    assert_error,
    bearer,
    run_cli,
    token_from_output,
)
from tests.fixtures.servers import (
    LiveServer,
    all_plants,
    child_pids,
    kill_server,
    start_server,
    stop_server,
    wait_for_started_workers,
)
from tests.ops.test_observability import Instrumented, answering_process, instrumented, sample

pytestmark = pytest.mark.server

WORKERS = 2
QUOTA = 50  # PLANTSTORE_MAX_PLANTS_PER_USER of the shared server
RATE = 5  # PLANTSTORE_RATE_LIMIT, per minute, of the rate test's server
BUSY_TIMEOUT = 0.3  # PLANTSTORE_BUSY_TIMEOUT_MS / 1000 of the lock test's server
TOKEN_ID = re.compile(r"Token (\d+) for user")
LOCK_WAIT = "plantstore_sqlite_write_lock_wait_seconds"
TIMEOUTS = "plantstore_sqlite_write_lock_timeouts_total"
LOCK_TIMEOUTS = "plantstore_sqlite_write_lock_timeouts_total"

Headers = dict[str, str]


def fresh_client(server: LiveServer) -> httpx.Client:
    """A client that opens a new connection for every request, so either worker may answer.

    One thread's: threads sharing it raced in httpcore's pool (see the quota test)."""
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=0)
    return httpx.Client(base_url=server.base_url, timeout=30, limits=limits)


def issue(server: LiveServer, user: str) -> Headers:
    return bearer(token_from_output(run_cli(server.db_url, "token", "create", user)))


def from_every_worker(
    send: Callable[[], httpx.Response], each: int = 1, attempts: int = 400
) -> dict[str, list[httpx.Response]]:
    """Send until every worker has answered ``each`` times; the answers by worker, in order."""
    answers: dict[str, list[httpx.Response]] = {}
    for _ in range(attempts):
        response = send()
        answers.setdefault(answering_process(response), []).append(response)
        if len(answers) == WORKERS and all(len(got) >= each for got in answers.values()):
            return answers
    counts = {worker: len(got) for worker, got in answers.items()}
    pytest.fail(f"not every worker answered {each} times in {attempts} requests: {counts}")


def sqlite_path(server: LiveServer) -> str:
    return server.db_url.removeprefix("sqlite:///")


def plant_count(server: LiveServer, user: str) -> int:
    """The user's plant counter (kept by triggers), read straight from the file."""
    with contextlib.closing(sqlite3.connect(sqlite_path(server), timeout=10)) as conn:
        [(count,)] = conn.execute("SELECT plant_count FROM users WHERE name = ?", (user,))
    assert isinstance(count, int)
    return count


def token_users(db_url: str) -> list[str]:
    lines = run_cli(db_url, "token", "list", "--json").splitlines()
    return [json.loads(line)["user"] for line in lines if line.strip()]


@contextmanager
def two_workers(directory: Path, **env: str) -> Iterator[Instrumented]:
    """``serve --workers 2`` on a fresh SQLite file, metrics on a port of its own, once both
    workers serve; afterwards, neither may have died and been replaced meanwhile."""
    db_url = f"sqlite:///{directory / 'workers.db'}"
    with instrumented(db_url, directory / "server.log", "--workers", str(WORKERS), **env) as live:
        wait_for_started_workers(live.server, WORKERS)
        workers = child_pids(live.server.process.pid)
        assert len(workers) == WORKERS, workers
        yield live
        assert child_pids(live.server.process.pid) == workers, "a worker died"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instrumented]:
    """One two-worker server for the tests that do not need settings of their own."""
    directory = tmp_path_factory.mktemp("sqlite-workers")
    with two_workers(directory, PLANTSTORE_MAX_PLANTS_PER_USER=str(QUOTA)) as live:
        yield live


# --- tokens ------------------------------------------------------------------------------------


def assert_invalid_token(response: httpx.Response) -> None:
    assert_error(response, 401)
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


def test_a_revoked_token_is_refused_by_every_worker_within_one_second(
    shared: Instrumented,
) -> None:
    server = shared.server
    created = run_cli(server.db_url, "token", "create", "revoked")
    match = TOKEN_ID.search(created)
    assert match is not None, created
    headers = bearer(token_from_output(created))
    with fresh_client(server) as http:
        # twice each: both workers now hold the token in their caches
        warm = from_every_worker(lambda: http.get("/plants", headers=headers), each=2)
        assert all(r.status_code == 200 for got in warm.values() for r in got), warm
        run_cli(server.db_url, "token", "revoke", match.group(1))
        time.sleep(1.0)  # the promise: refused everywhere within one second of the revoke
        refused = from_every_worker(lambda: http.get("/plants", headers=headers), each=5)
    for answers in refused.values():
        for response in answers:
            assert_invalid_token(response)


def test_two_servers_of_two_workers_starting_together_issue_one_first_token(
    tmp_path: Path,
) -> None:
    """Two ``serve --workers 2`` on one fresh file at the same moment: the schema is made
    once, one token is issued and printed once, and all four workers accept it."""
    db_url = f"sqlite:///{tmp_path / 'fresh.db'}"
    servers: list[LiveServer] = []
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            starts = [
                pool.submit(start_server, db_url, tmp_path / f"server-{n}.log", "--workers", "2")
                for n in range(2)
            ]
            failures = []
            for start in starts:
                try:
                    servers.append(start.result())
                except RuntimeError as exc:  # the other one is still stopped below
                    failures.append(str(exc))
        assert not failures, failures
        for server in servers:
            wait_for_started_workers(server, WORKERS)
        tokens = [server.token for server in servers if server.token]
        assert len(tokens) == 1, [server.log_path.read_text() for server in servers]
        logs = [server.log_path.read_text() for server in servers]
        assert sum(log.count("pst_") for log in logs) == 1, logs
        assert not [log for log in logs if "Traceback" in log], logs
        for server in servers:
            with fresh_client(server) as http:
                answers = from_every_worker(lambda: http.get("/plants", headers=bearer(tokens[0])))
            statuses = {r.status_code for got in answers.values() for r in got}
            assert statuses == {200}, statuses
    finally:
        for server in servers:
            stop_server(server)
    assert [server.process.returncode for server in servers] == [0, 0]
    assert token_users(db_url) == ["default"]
    assert current_revision(db_url) == head_revision()


# --- the quota, cursors and rate budgets ---------------------------------------------------------


def test_the_quota_is_exact_under_racing_creates_on_both_workers(shared: Instrumented) -> None:
    server = shared.server
    headers = issue(server, "quota")
    attempts = 4 * QUOTA

    def create(plant_id: int) -> httpx.Response:
        # A client each: httpcore's pool, shared by threads with no keep-alive, can close a
        # connection another thread is reading ("Bad file descriptor", seen once in CI).
        with fresh_client(server) as http:
            body = {"id": plant_id, "name": f"q{plant_id}"}
            return http.post("/plants", json=body, headers=headers)

    with ThreadPoolExecutor(max_workers=32) as pool:
        answers = list(pool.map(create, range(attempts)))
    statuses = Counter(response.status_code for response in answers)
    assert statuses == {200: QUOTA, 403: attempts - QUOTA}, statuses
    for response in answers:
        if response.status_code == 403:
            assert_error(response, 403, "quota")
    stored_by = {answering_process(r) for r in answers if r.status_code == 200}
    refused_by = {answering_process(r) for r in answers if r.status_code == 403}
    assert len(stored_by) == len(refused_by) == WORKERS, (stored_by, refused_by)
    token = headers["Authorization"].removeprefix("Bearer ")
    listed = sorted(plant["name"] for plant in all_plants(server, token))
    acknowledged = sorted(f"q{n}" for n, r in enumerate(answers) if r.status_code == 200)
    assert listed == acknowledged
    assert plant_count(server, "quota") == QUOTA


def test_a_cursor_from_one_worker_is_honoured_by_the_other(shared: Instrumented) -> None:
    """Each next page is fetched until the worker that did not issue its cursor answers."""
    server = shared.server
    headers = issue(server, "pager")
    ids = list(range(-45, 45, 3))  # 30 plants, negative ids too
    listed: list[dict[str, str]] = []
    handed_over = 0
    with fresh_client(server) as http:
        for plant_id in random.Random(13).sample(ids, len(ids)):
            body = {"id": plant_id, "name": f"p{plant_id}"}
            assert http.post("/plants", json=body, headers=headers).status_code == 200
        url: str | None = "/plants?limit=4"
        issued_by: str | None = None
        while url is not None:
            for _ in range(200):
                response = http.get(url, headers=headers)
                assert response.status_code == 200, response.text
                if issued_by is None or answering_process(response) != issued_by:
                    break
            else:
                pytest.fail(f"only the worker that issued the cursor answered {url}")
            handed_over += issued_by is not None
            issued_by = answering_process(response)
            listed.extend(response.json())
            link = response.headers.get("link")
            url = link[1 : link.index(">")] if link else None
    assert listed == [{"name": f"p{plant_id}"} for plant_id in sorted(ids)]
    assert handed_over == len(ids) // 4  # every page after the first


def test_the_workers_spend_one_rate_budget(tmp_path: Path) -> None:
    """Without Redis too, the workers of one server share one budget (in shared memory): one
    token gets ``RATE`` requests per minute from the server, however the kernel spreads them."""
    with two_workers(tmp_path, PLANTSTORE_RATE_LIMIT=f"{RATE}/minute") as live:
        headers = bearer(live.server.token)
        with fresh_client(live.server) as http:
            answers = from_every_worker(lambda: http.get("/plants", headers=headers), RATE + 3)
    statuses = [response.status_code for got in answers.values() for response in got]
    assert statuses.count(200) == RATE, statuses
    assert all(any(response.status_code == 429 for response in got) for got in answers.values()), (
        "a worker never refused: it kept a budget of its own"
    )
    for got in answers.values():
        for refused in (response for response in got if response.status_code != 200):
            assert_error(refused, 429, "token")
            assert refused.headers["retry-after"].isdigit()


# --- the write lock: shared, bounded, never a 500 ------------------------------------------------

LOAD_THREADS = 64
LOAD_USERS = 8
LOAD_STEPS = 30  # operations per thread
LIVE_PER_THREAD = 3  # plants a thread keeps at most (8 threads a user: 24, under the quota)


def test_racing_writes_on_both_workers_never_fail_with_database_is_locked(
    shared: Instrumented,
) -> None:
    """64 threads create and delete over both workers at once: every answer is a 200 or 204,
    or a 503 with Retry-After and the Error body (then repeated until definite), never a 500;
    afterwards each user has exactly the plants acknowledged and not deleted since."""
    server = shared.server
    tokens = {f"load-{n}": issue(server, f"load-{n}") for n in range(LOAD_USERS)}
    before = shared.scrape()
    statuses: Counter[int] = Counter()
    unavailable: list[httpx.Response] = []
    wrong: list[str] = []
    writers: set[str] = set()

    def send(
        http: httpx.Client, method: str, url: str, headers: Headers, body: object = None
    ) -> int:
        for _ in range(100):
            response = http.request(method, url, headers=headers, json=body)
            statuses[response.status_code] += 1
            if response.status_code != 503:
                if response.status_code < 300:
                    writers.add(answering_process(response))
                return response.status_code
            unavailable.append(response)
            time.sleep(0.05)
        return 503

    def run(index: int) -> tuple[str, set[int]]:
        user = f"load-{index % LOAD_USERS}"
        headers, rng = tokens[user], random.Random(index)
        present: list[int] = []
        with fresh_client(server) as http:
            for step in range(LOAD_STEPS):
                if present and (len(present) >= LIVE_PER_THREAD or rng.random() < 0.4):
                    plant_id = present.pop(rng.randrange(len(present)))
                    status = send(http, "DELETE", f"/plants/{plant_id}", headers)
                    if status != 204:
                        wrong.append(f"delete {user}/{plant_id}: {status}")
                else:
                    plant_id = index * 1_000 + step
                    body = {"id": plant_id, "name": f"{plant_id}"}
                    status = send(http, "POST", "/plants", headers, body)
                    if status == 200:
                        present.append(plant_id)
                    else:
                        wrong.append(f"create {user}/{plant_id}: {status}")
        return user, set(present)

    with ThreadPoolExecutor(max_workers=LOAD_THREADS) as pool:
        kept = list(pool.map(run, range(LOAD_THREADS)))
    after = shared.scrape()

    assert statuses[500] == 0, f"{statuses[500]} answers were 500s: {statuses}"
    assert set(statuses) <= {200, 204, 503}, statuses
    assert not wrong, wrong[:10]
    for response in unavailable:
        assert_error(response, 503)
        assert response.headers["retry-after"] == "1"
    assert len(writers) == WORKERS, writers
    expected: dict[str, set[int]] = {user: set() for user in tokens}
    for user, present in kept:
        expected[user] |= present
    for user, headers in tokens.items():
        token = headers["Authorization"].removeprefix("Bearer ")
        stored = {int(plant["name"]) for plant in all_plants(server, token)}
        assert stored == expected[user], user
        assert plant_count(server, user) == len(stored), user
    # Each worker commits its own writes, taking SQLite's lock in turns: they waited for
    # each other, and none waited out the busy timeout.
    waits = sample(after, f"{LOCK_WAIT}_count") - sample(before, f"{LOCK_WAIT}_count")
    assert waits > 0, "no commit waited for the other worker's: did both workers commit?"
    timeouts = sample(after, TIMEOUTS) - sample(before, TIMEOUTS)
    assert timeouts == 0, f"{timeouts} commits waited out the busy timeout"


def test_a_lock_held_past_the_bound_is_a_503_never_a_500(tmp_path: Path) -> None:
    """Another process holds SQLite's write lock (``BEGIN IMMEDIATE``, not committed) for
    longer than PLANTSTORE_BUSY_TIMEOUT_MS: each worker answers writes with a 503 after that
    bound, reads go on, the timeouts are counted, and once the lock is free writes succeed."""
    busy_ms = str(int(BUSY_TIMEOUT * 1000))
    with two_workers(tmp_path, PLANTSTORE_BUSY_TIMEOUT_MS=busy_ms) as live:
        server = live.server
        headers = issue(server, "blocked")
        with fresh_client(server) as http:
            created = http.post("/plants", json={"id": 1, "name": "before"}, headers=headers)
            assert created.status_code == 200, created.text
            warm = from_every_worker(lambda: http.get("/plants", headers=headers), each=2)
            assert all(r.status_code == 200 for got in warm.values() for r in got)
            before = live.scrape()

            holder = sqlite3.connect(sqlite_path(server), timeout=10, isolation_level=None)
            try:
                holder.execute("BEGIN IMMEDIATE")  # the write lock, held until the rollback
                durations: list[float] = []
                ids = iter(range(100, 1_000))

                def blocked_create() -> httpx.Response:
                    plant_id = next(ids)
                    started = time.monotonic()
                    body = {"id": plant_id, "name": "blocked"}
                    response = http.post("/plants", json=body, headers=headers)
                    durations.append(time.monotonic() - started)
                    return response

                refused = from_every_worker(blocked_create)
                refused_delete = http.delete("/plants/1", headers=headers)
                listed_meanwhile = http.get("/plants", headers=headers)
            finally:
                holder.rollback()
                holder.close()
            created_after = http.post("/plants", json={"id": 2, "name": "after"}, headers=headers)
            listed_after = http.get("/plants", headers=headers)
        after = live.scrape()

    answers = [response for got in refused.values() for response in got]
    for response in [*answers, refused_delete]:
        assert_error(response, 503)
        assert response.headers["retry-after"] == "1"
    for seconds in durations:  # each waited out the bound, and was answered soon after it
        assert BUSY_TIMEOUT <= seconds < BUSY_TIMEOUT + 1.0, durations
    assert listed_meanwhile.status_code == 200  # reads do not wait for the write lock
    assert listed_meanwhile.json() == [{"name": "before"}]
    assert created_after.status_code == 200, created_after.text
    assert listed_after.json() == [{"name": "before"}, {"name": "after"}]  # no 503 landed later

    timeouts = sample(after, LOCK_TIMEOUTS) - sample(before, LOCK_TIMEOUTS)
    assert timeouts >= len(answers) + 1, (timeouts, len(answers))  # the delete's too
    waited = sample(after, f"{LOCK_WAIT}_sum") - sample(before, f"{LOCK_WAIT}_sum")
    assert waited >= BUSY_TIMEOUT * timeouts
    assert not sample(
        after, "plantstore_http_requests_total", method="POST", route="/plants", status="500"
    )


# --- SIGTERM under load --------------------------------------------------------------------------


def test_sigterm_under_load_on_two_workers_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'stop.db'}"
    tokens = {user: token_from_output(run_cli(db_url, "token", "create", user)) for user in USERS}
    server = start_server(
        db_url, tmp_path / "server.log", "--workers", "2", PLANTSTORE_SHUTDOWN_TIMEOUT="20"
    )
    traffic = Traffic(server, tokens, fresh_connections=True)
    try:
        wait_for_started_workers(server, WORKERS)
        traffic.start(until_answered=200)
        signalled_at = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        refused = refuses_connections(server, signalled_at + EXIT_BOUND)
        returncode = wait_exit(server, signalled_at, EXIT_BOUND)
        time.sleep(0.3)  # traffic goes on a little after the exit: it is refused
    finally:
        traffic.stop()
        if server.process.poll() is None:
            kill_server(server)
    with pytest.raises(ProcessLookupError):  # no worker outlived the server
        os.killpg(server.process.pid, 0)

    assert returncode == 0, server.log_path.read_text()[-2000:]
    assert refused, "new connections were still accepted after SIGTERM"
    broken = [outcome for outcome in traffic.outcomes if outcome.kind == "broken"]
    assert not broken, f"{len(broken)} requests cut off or failed, e.g. {broken[:5]}"
    answered = [outcome for outcome in traffic.outcomes if outcome.kind == "answered"]
    assert len({outcome.request_id[:12] for outcome in answered}) == WORKERS
    assert any(outcome.finished > signalled_at for outcome in answered)
    with contextlib.closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as conn:
        stored = set(
            conn.execute(
                "SELECT users.name, plants.name, plants.tag FROM plants "
                "JOIN users ON users.id = plants.user_id"
            )
        )
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    acknowledged = {(outcome.user, *outcome.plant) for outcome in answered}
    lost = acknowledged - stored
    assert not lost, f"{len(lost)} acknowledged creates lost: {sorted(lost)[:10]}"
