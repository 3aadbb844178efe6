"""Rate limits: per token (429, Error body, Retry-After), per address for failed
authentications (before any token is looked up), and shared through Redis across instances."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx
import httpx2
import pytest
from starlette.testclient import TestClient

from plantstore.app import create_app
from plantstore.settings import Settings
from tests import pg
from tests.fixtures.calls import IssueToken, assert_error, bearer
from tests.fixtures.servers import start_server, stop_server

REDIS = ("127.0.0.1", 6379)
Response = httpx.Response | httpx2.Response


def limited_client(db_url: str, **limits: str) -> TestClient:
    settings = Settings(database_url=db_url, trusted_proxies="testclient", **limits)  # type: ignore[arg-type]
    return TestClient(create_app(settings), raise_server_exceptions=False)


def assert_too_many(response: Response, *names: str) -> None:
    assert_error(response, 429, *names)
    retry_after = response.headers["retry-after"]
    assert retry_after.isdigit(), retry_after
    assert 1 <= int(retry_after) <= 60, retry_after


def test_a_token_past_its_rate_gets_429_and_other_tokens_do_not(
    db_url: str, issue_token: IssueToken
) -> None:
    alice, bob = bearer(issue_token("alice")), bearer(issue_token("bob"))
    with limited_client(db_url, rate_limit="5/minute") as client:
        answers = [client.get("/plants", headers=alice).status_code for _ in range(5)]
        assert answers == [200] * 5
        assert_too_many(client.get("/plants", headers=alice), "token")
        refused_create = client.post("/plants", headers=alice, json={"id": 1, "name": "no"})
        assert_too_many(refused_create, "token")
        assert client.get("/plants", headers=bob).status_code == 200
        assert client.get("/plants", headers=bob).json() == []


def test_failed_authentications_lock_the_address_out_before_any_lookup(
    db_url: str, issue_token: IssueToken
) -> None:
    good = bearer(issue_token("alice"))
    guess = bearer("pst_" + "A" * 43)
    guesser = {"X-Forwarded-For": "198.51.100.7"}
    other = {"X-Forwarded-For": "198.51.100.8"}
    with limited_client(db_url, auth_failure_limit="3/minute") as client:
        for _ in range(3):
            assert_error(client.get("/plants", headers={**guess, **guesser}), 401)
        assert_too_many(client.get("/plants", headers={**guess, **guesser}), "authentication")
        assert_too_many(client.get("/plants", headers={**good, **guesser}), "authentication")
        assert client.get("/plants", headers={**good, **other}).status_code == 200
        assert_error(client.get("/plants", headers={**guess, **other}), 401)


def test_good_requests_never_spend_the_failure_budget(db_url: str, issue_token: IssueToken) -> None:
    """Good requests that each reach the lookup leave the budget as it was.

    Each good request has a token of its own: a token found in the cache skips the address's
    budget altogether, so the same token again would prove nothing. With 2/minute, one
    failure, then the good lookups, then a second failure that must still be a 401; the third
    is a 429, which shows the budget was live all along.
    """
    guess = bearer("pst_" + "A" * 43)
    goods = [bearer(issue_token(f"good-{number}")) for number in range(5)]
    with limited_client(db_url, auth_failure_limit="2/minute") as client:
        assert_error(client.get("/plants", headers=guess), 401)  # one of two spent
        assert [client.get("/plants", headers=good).status_code for good in goods] == [200] * 5
        assert_error(client.get("/plants", headers=guess), 401)  # the second: still a 401
        assert_too_many(client.get("/plants", headers=guess), "authentication")


def test_x_forwarded_for_is_ignored_from_an_untrusted_peer(
    db_url: str, issue_token: IssueToken
) -> None:
    guess = bearer("pst_" + "A" * 43)
    settings = Settings(database_url=db_url, auth_failure_limit="2/minute")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        for address in ("198.51.100.1", "198.51.100.2"):  # spoofed: both count as the peer
            assert_error(client.get("/plants", headers={**guess, "X-Forwarded-For": address}), 401)
        spoofed = {**guess, "X-Forwarded-For": "198.51.100.3"}
        assert_too_many(client.get("/plants", headers=spoofed), "authentication")


def test_a_bad_rate_setting_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="not a rate"):
        Settings(rate_limit="lots")


def redis_available() -> bool:
    try:
        socket.create_connection(REDIS, timeout=1).close()
    except OSError:
        return False
    return True


@pytest.mark.skipif(not redis_available(), reason="no Redis on 127.0.0.1:6379")
@pytest.mark.server
def test_instances_sharing_redis_share_one_budget(
    postgres: pg.PostgresServer, tmp_path: Path
) -> None:
    db_url = postgres.create_database()  # a fresh one: its first token is new to Redis
    env = {"PLANTSTORE_RATE_LIMIT": "6/minute", "PLANTSTORE_REDIS_URL": "redis://127.0.0.1:6379"}
    servers = [start_server(db_url, tmp_path / f"{name}.log", **env) for name in "ab"]
    token = servers[0].token
    try:
        answers = [
            httpx.get(f"{servers[i % 2].base_url}/plants", headers=bearer(token)).status_code
            for i in range(6)
        ]
        assert answers == [200] * 6
        for server in servers:
            refused = httpx.get(f"{server.base_url}/plants", headers=bearer(token))
            assert_too_many(refused, "token")
    finally:
        for server in servers:
            stop_server(server)


def test_an_unreachable_redis_leaves_requests_served_and_says_so(
    db_url: str, issue_token: IssueToken, caplog: pytest.LogCaptureFixture
) -> None:
    alice = bearer(issue_token("alice"))
    settings = Settings(database_url=db_url, rate_limit="1/minute", redis_url="redis://127.0.0.1:1")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        answers = [client.get("/plants", headers=alice).status_code for _ in range(3)]
    assert answers == [200, 200, 200]  # the limit is not enforced without its store
    assert any("rate limits not enforced" in record.getMessage() for record in caplog.records)


@pytest.mark.skipif(not redis_available(), reason="no Redis on 127.0.0.1:6379")
@pytest.mark.server
def test_the_redis_budget_admits_no_more_than_the_limit_across_a_window_edge(
    tmp_path: Path,
) -> None:
    """A fixed window let a burst just before a window's end and another just after both in:
    twice the limit within a second. The moving window admits the limit, no more."""
    db_url = f"sqlite:///{tmp_path / 'edge.db'}"
    env = {"PLANTSTORE_RATE_LIMIT": "4/second", "PLANTSTORE_REDIS_URL": "redis://127.0.0.1:6379"}
    server = start_server(db_url, tmp_path / "serve.log", **env)
    try:
        with httpx.Client(base_url=server.base_url, headers=bearer(server.token)) as http:
            assert http.get("/healthz").status_code == 200  # the connection, made ahead
            for _ in range(5):  # a busy host may stretch a burst past the edge: try the next
                edge = int(time.time()) + 2  # the end of a second, at least one second away
                time.sleep(edge - 0.3 - time.time())  # 300 ms before it
                before = [http.get("/plants").status_code for _ in range(4)]
                if time.time() < edge:
                    break
            else:
                pytest.fail("no burst of four requests was over within 300 ms in five tries")
            time.sleep(edge + 0.05 - time.time())  # just past it
            after = [http.get("/plants").status_code for _ in range(4)]
    finally:
        stop_server(server)
    assert before == [200] * 4
    assert after.count(200) == 0, after
