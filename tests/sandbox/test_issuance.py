"""The sandbox issuance limit is counted in the database: exactly, across the workers of one
server, across a restart, and across instances on one database with no Redis; the address
is stored only as a keyed hash."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.fixtures.backends import new_database_url
from tests.fixtures.servers import child_pids, start_server, stop_server, wait_for_started_workers
from tests.sandbox.test_sandbox import rows

pytestmark = pytest.mark.server

SANDBOX = {"PLANTSTORE_SANDBOX": "true", "PLANTSTORE_TRUSTED_PROXIES": "127.0.0.1"}
VISITOR = {"X-Forwarded-For": "203.0.113.7"}


def issue(base_url: str, headers: dict[str, str] = VISITOR) -> int:
    """POST /sandbox/tokens on a connection of its own, so the kernel spreads the requests
    over the server's workers."""
    with httpx.Client(base_url=base_url, headers={"Connection": "close"}) as http:
        return http.post("/sandbox/tokens", headers=headers).status_code


def test_three_workers_issue_no_more_than_the_limit(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'issue.db'}"
    env = {**SANDBOX, "PLANTSTORE_SANDBOX_ISSUE_LIMIT": "6/hour"}
    server = start_server(db_url, tmp_path / "serve.log", "--workers", "3", **env)
    try:
        wait_for_started_workers(server, 3)
        assert len(child_pids(server.process.pid)) == 3
        statuses = [issue(server.base_url) for _ in range(30)]
        answered_by = {
            line.split('"request_id":"')[1][:12]
            for line in server.log_path.read_text().splitlines()
            if '"route":"/sandbox/tokens"' in line
        }
    finally:
        stop_server(server)
    assert statuses.count(200) == 6, statuses
    assert statuses.count(429) == 24
    assert len(answered_by) > 1, "one worker answered every request"  # its id prefix


def test_the_budget_survives_a_restart(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'issue.db'}"
    env = {**SANDBOX, "PLANTSTORE_SANDBOX_ISSUE_LIMIT": "3/hour"}
    first = start_server(db_url, tmp_path / "first.log", **env)
    try:
        assert [issue(first.base_url) for _ in range(2)] == [200, 200]
    finally:
        stop_server(first)
    second = start_server(db_url, tmp_path / "second.log", **env)
    try:
        assert [issue(second.base_url) for _ in range(3)] == [200, 429, 429]
        assert issue(second.base_url, {"X-Forwarded-For": "203.0.113.8"}) == 200
    finally:
        stop_server(second)


def test_instances_on_postgresql_share_the_budget_without_redis(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db_url = new_database_url("postgres", tmp_path, request)
    env = {**SANDBOX, "PLANTSTORE_SANDBOX_ISSUE_LIMIT": "4/hour"}
    one = start_server(db_url, tmp_path / "one.log", **env)
    two = start_server(db_url, tmp_path / "two.log", **env)
    try:
        statuses = [issue(server.base_url) for server in (one, two) * 5]
    finally:
        stop_server(one)
        stop_server(two)
    assert statuses == [200] * 4 + [429] * 6


def test_the_address_is_stored_only_as_a_keyed_hash(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'issue.db'}"
    server = start_server(db_url, tmp_path / "serve.log", **SANDBOX)
    try:
        assert issue(server.base_url) == 200
        token_rows = rows(db_url, "SELECT address_key FROM sandbox_issues")
    finally:
        stop_server(server)
    [(key,)] = token_rows
    assert isinstance(key, str)
    assert len(key) == 64
    assert "203.0.113.7" not in key
    for stored in tmp_path.glob("issue.db*"):  # the file, and a WAL if one is left
        assert b"203.0.113.7" not in stored.read_bytes(), stored


@pytest.mark.serial  # three issues within one second
def test_the_purge_forgets_issues_past_the_window(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'issue.db'}"
    env = {**SANDBOX, "PLANTSTORE_SANDBOX_ISSUE_LIMIT": "2/second", "PLANTSTORE_SANDBOX_TTL": "10s"}
    server = start_server(db_url, tmp_path / "serve.log", **env)
    try:
        for attempt in range(1, 6):  # three issues within the second; a stalled host retries
            visitor = {"X-Forwarded-For": f"203.0.113.{attempt}"}
            started = time.monotonic()
            statuses = [issue(server.base_url, visitor) for _ in range(3)]
            if time.monotonic() - started < 0.9:
                break
        assert statuses == [200, 200, 429]
        deadline = time.monotonic() + 10
        while rows(db_url, "SELECT count(*) FROM sandbox_issues") != [(0,)]:
            assert time.monotonic() < deadline, "old issues were never forgotten"
            time.sleep(0.2)
        assert issue(server.base_url, visitor) == 200
    finally:
        stop_server(server)
