"""Webhooks delivered by real servers to real receivers on loopback ports, on each backend;
signatures verified with the ``standardwebhooks`` package (not our code)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import standardwebhooks

from tests.fixtures.backends import TWO_WORKERS, new_database_url, run_sql
from tests.fixtures.calls import bearer, run_cli, token_from_output
from tests.fixtures.servers import LiveServer, start_server, stop_server
from tests.webhooks.webhook_receiver import Received, receiver

# HTTP to the service alone (no in-process app, settings or logs): on the two-worker server too.
pytestmark = [pytest.mark.backends("sqlite", "postgres", "sqlite-2workers"), pytest.mark.server]

FAST_RETRIES = "0s,1s,1s"
PRIVATE_OK = {"PLANTSTORE_WEBHOOK_ALLOW_PRIVATE": "true"}


@pytest.fixture
def server(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    """A server that may deliver to loopback, with fast retries; on TWO_WORKERS, two worker
    processes (two dispatchers) on one SQLite file."""
    db_url = new_database_url(backend, tmp_path, request)
    workers = ["--workers", "2"] if backend == TWO_WORKERS else []
    live = start_server(
        db_url,
        tmp_path / "server.log",
        *workers,
        **PRIVATE_OK,
        PLANTSTORE_WEBHOOK_RETRY_SCHEDULE=FAST_RETRIES,
    )
    yield live
    stop_server(live)


def token_for(server: LiveServer, user: str) -> dict[str, str]:
    return bearer(token_from_output(run_cli(server.db_url, "token", "create", user)))


def subscribe(
    http: httpx.Client, auth: dict[str, str], url: str, **extra: object
) -> dict[str, object]:
    response = http.post("/webhooks", json={"url": url, **extra}, headers=auth)
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def verified(secret: str, message: Received) -> Any:
    """The event, once ``standardwebhooks`` has checked its signature and timestamp."""
    return standardwebhooks.Webhook(secret).verify(message.body, message.headers)


def test_signed_events_for_creates_and_deletes(server: LiveServer) -> None:
    alice = token_for(server, "alice")
    with receiver() as hook, server.client() as http:
        created = subscribe(http, alice, hook.url)
        assert set(created) == {"id", "url", "events", "secret"}
        assert created["events"] == ["plant.created", "plant.deleted"]
        secret = str(created["secret"])
        assert secret.startswith("whsec_")
        assert (
            http.post("/plants", json={"id": 1, "name": "Fern"}, headers=alice).status_code == 200
        )
        assert (
            http.post(
                "/plants", json={"id": 2, "name": "Ivy", "tag": "vine"}, headers=alice
            ).status_code
            == 200
        )
        assert http.delete("/plants/2", headers=alice).status_code == 204
        messages = hook.wait_for(3)
    events = sorted(
        (verified(secret, m) for m in messages), key=lambda e: (e["type"], e["data"]["id"])
    )
    assert [(e["type"], e["data"]) for e in events] == [
        ("plant.created", {"id": 1, "name": "Fern"}),
        ("plant.created", {"id": 2, "name": "Ivy", "tag": "vine"}),
        ("plant.deleted", {"id": 2, "name": "Ivy", "tag": "vine"}),
    ]
    for event in events:
        assert str(event["timestamp"]).endswith("Z")
    for message in messages:
        assert message.headers["content-type"] == "application/json"
        assert re.fullmatch("msg_[0-9a-f]{32}", message.headers["webhook-id"])  # either backend
    assert len({m.headers["webhook-id"] for m in messages}) == 3
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook("whsec_" + "A" * 43 + "=").verify(
            messages[0].body, messages[0].headers
        )


def deliveries(http: httpx.Client, auth: dict[str, str], subscription_id: object) -> Any:
    response = http.get(f"/webhooks/{subscription_id}/deliveries", headers=auth)
    assert response.status_code == 200, response.text
    return response.json()


def wait_until(check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.05)


def test_failed_attempts_are_retried_with_the_same_webhook_id(server: LiveServer) -> None:
    alice = token_for(server, "alice")
    with receiver(lambda n: (500 if n < 2 else 200, {}, 0.0)) as hook, server.client() as http:
        created = subscribe(http, alice, hook.url, events=["plant.created"])
        assert (
            http.post("/plants", json={"id": 7, "name": "Fern"}, headers=alice).status_code == 200
        )
        messages = hook.wait_for(3)
        [delivery] = wait_until(
            lambda: [
                d for d in deliveries(http, alice, created["id"]) if d["status"] == "delivered"
            ]
        )
    assert len({m.headers["webhook-id"] for m in messages}) == 1
    assert len({m.body for m in messages}) == 1  # the event is fixed at the change
    for message in messages:
        assert verified(str(created["secret"]), message)["data"] == {"id": 7, "name": "Fern"}
    assert delivery["attempts"] == 3
    assert delivery["webhook_id"] == messages[0].headers["webhook-id"]
    assert delivery["last_status"] == 200


def test_retries_stop_after_the_schedule(server: LiveServer) -> None:
    alice = token_for(server, "alice")
    with receiver(lambda n: (500, {}, 0.0)) as hook, server.client() as http:
        created = subscribe(http, alice, hook.url)
        assert (
            http.post("/plants", json={"id": 1, "name": "Fern"}, headers=alice).status_code == 200
        )
        [delivery] = wait_until(
            lambda: [d for d in deliveries(http, alice, created["id"]) if d["status"] == "failed"]
        )
        assert len(hook.snapshot()) == len(FAST_RETRIES.split(","))
        assert delivery["attempts"] == 3
        assert delivery["last_status"] == 500
        # A failed delivery is sent again on request, with the same webhook-id.
        answer = http.post(
            f"/webhooks/{created['id']}/redeliver",
            json={"since": "2000-01-01T00:00:00Z"},
            headers=alice,
        )
        assert answer.status_code == 202, answer.text
        assert answer.json() == {"redelivered": 1}
        messages = hook.wait_for(4)
    assert messages[3].headers["webhook-id"] == messages[0].headers["webhook-id"]


def test_410_disables_the_subscription(server: LiveServer) -> None:
    alice = token_for(server, "alice")
    with receiver(lambda n: (410, {}, 0.0)) as hook, server.client() as http:
        created = subscribe(http, alice, hook.url)
        assert (
            http.post("/plants", json={"id": 1, "name": "Fern"}, headers=alice).status_code == 200
        )
        hook.wait_for(1)
        [listed] = wait_until(
            lambda: [w for w in http.get("/webhooks", headers=alice).json() if not w["enabled"]]
        )
        assert listed["id"] == created["id"]
        assert "410" in listed["disabled_reason"]
        [delivery] = deliveries(http, alice, created["id"])
        assert delivery["status"] == "failed"
        assert delivery["attempts"] == 1
        # A disabled subscription is sent nothing more: its events are not even queued.
        assert http.post("/plants", json={"id": 2, "name": "Ivy"}, headers=alice).status_code == 200
        assert len(deliveries(http, alice, created["id"])) == 1
    assert len(hook.snapshot()) == 1


def test_retry_after_is_waited_for(server: LiveServer) -> None:
    alice = token_for(server, "alice")
    answers = {0: (503, {"Retry-After": "3"}, 0.0), 1: (429, {"Retry-After": "2"}, 0.0)}
    with receiver(lambda n: answers.get(n, (200, {}, 0.0))) as hook, server.client() as http:
        subscribe(http, alice, hook.url)
        assert (
            http.post("/plants", json={"id": 1, "name": "Fern"}, headers=alice).status_code == 200
        )
        first, second, third = hook.wait_for(3)
    # The schedule alone would retry after about 1 s; the receiver asked for 3 s, then 2 s.
    assert second.at - first.at >= 2.9
    assert third.at - second.at >= 1.9


def test_a_hanging_receiver_does_not_hold_up_others(server: LiveServer) -> None:
    alice, bob = token_for(server, "alice"), token_for(server, "bob")
    with (
        receiver(lambda n: (200, {}, 20.0)) as stuck,
        receiver() as fast,
        server.client() as http,
    ):
        subscribe(http, alice, stuck.url)
        subscribe(http, bob, fast.url)
        for plant_id in range(40):
            plant = {"id": plant_id, "name": "Fern"}
            assert http.post("/plants", json=plant, headers=alice).status_code == 200
        stuck.wait_for(1)
        for plant_id in range(20):
            plant = {"id": plant_id, "name": "Ivy"}
            assert http.post("/plants", json=plant, headers=bob).status_code == 200
        got = fast.wait_for(20)
        assert len(stuck.snapshot()) < 40  # the stuck one is still stuck meanwhile
        # ... and the API answers as ever.
        assert http.get("/plants?limit=1", headers=alice).status_code == 200
    assert {json.loads(m.body)["data"]["id"] for m in got} == set(range(20))


def test_a_subscriber_hears_only_its_own_users_changes(server: LiveServer) -> None:
    alice, bob = token_for(server, "alice"), token_for(server, "bob")
    with receiver() as alices, receiver() as bobs, server.client() as http:
        subscribe(http, alice, alices.url)
        subscribe(http, bob, bobs.url)
        for plant_id in range(5):
            assert (
                http.post("/plants", json={"id": plant_id, "name": "A"}, headers=alice).status_code
                == 200
            )
            assert (
                http.post("/plants", json={"id": plant_id, "name": "B"}, headers=bob).status_code
                == 200
            )
        assert {json.loads(m.body)["data"]["name"] for m in alices.wait_for(5)} == {"A"}
        assert {json.loads(m.body)["data"]["name"] for m in bobs.wait_for(5)} == {"B"}
        time.sleep(1)  # anything misrouted would have arrived by now
    assert len(alices.snapshot()) == 5
    assert len(bobs.snapshot()) == 5


@pytest.mark.backends("sqlite", "postgres")  # a server of its own
def test_connection_time_check_refuses_a_private_address(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A subscription whose name resolves to loopback (as after DNS rebinding; written behind
    the API's back here) is refused when connecting, and nothing reaches the receiver."""
    db_url = new_database_url(backend, tmp_path, request)
    live = start_server(db_url, tmp_path / "server.log", PLANTSTORE_WEBHOOK_RETRY_SCHEDULE="0s")
    try:
        alice = token_for(live, "alice")
        with receiver() as hook, live.client() as http:
            port = hook.url.split(":")[2].split("/")[0]
            for host in ("localhost", "127.0.0.1"):
                run_sql(
                    db_url,
                    "INSERT INTO webhook_subscriptions (user_id, url, events, secret, enabled, "
                    f"created_at) SELECT id, 'http://{host}:{port}/hook', 3, "
                    f"'whsec_{'A' * 43}=', true, 0 FROM users WHERE name = 'alice'",
                )
            assert (
                http.post("/plants", json={"id": 1, "name": "F"}, headers=alice).status_code == 200
            )
            for subscription in http.get("/webhooks", headers=alice).json():
                [delivery] = wait_until(
                    lambda: [
                        d
                        for d in deliveries(http, alice, subscription["id"])
                        if d["status"] == "failed"
                    ]
                )
                assert delivery["last_error"].startswith("refused"), delivery
            assert hook.snapshot() == []
    finally:
        stop_server(live)


def test_operator_commands_list_disable_enable_and_rotate(server: LiveServer) -> None:
    alice = token_for(server, "alice")
    with receiver() as hook, server.client() as http:
        created = subscribe(http, alice, hook.url)
        old_secret = str(created["secret"])
        listing = run_cli(server.db_url, "webhook", "list", "alice", "--json")
        assert json.loads(listing) == {
            "id": created["id"],
            "user": "alice",
            "issuer": None,  # the operator's user, not a JWT issuer's
            "url": hook.url,
            "events": ["plant.created", "plant.deleted"],
            "enabled": True,
            "created": json.loads(listing)["created"],
            "disabled_reason": None,
        }
        assert "whsec_" not in run_cli(server.db_url, "webhook", "list")
        assert run_cli(server.db_url, "webhook", "list", "bob", "--json") == ""

        run_cli(server.db_url, "webhook", "disable", str(created["id"]))
        [listed] = http.get("/webhooks", headers=alice).json()
        assert listed["enabled"] is False
        assert listed["disabled_reason"] == "disabled by an operator"
        assert http.post("/plants", json={"id": 1, "name": "F"}, headers=alice).status_code == 200
        run_cli(server.db_url, "webhook", "enable", str(created["id"]))
        assert http.get("/webhooks", headers=alice).json()[0]["enabled"] is True

        output = run_cli(server.db_url, "webhook", "rotate-secret", str(created["id"]))
        new_secret = output.rstrip("\n").splitlines()[-1]
        assert new_secret.startswith("whsec_")
        assert new_secret != old_secret
        assert http.post("/plants", json={"id": 2, "name": "G"}, headers=alice).status_code == 200
        [message] = hook.wait_for(1)
    # Disabled, the first create was not queued; after the rotation both secrets sign.
    assert json.loads(message.body)["data"] == {"id": 2, "name": "G"}
    assert len(message.headers["webhook-signature"].split(" ")) == 2
    assert verified(new_secret, message)["data"]["id"] == 2
    assert verified(old_secret, message)["data"]["id"] == 2


def test_redirects_are_not_followed(server: LiveServer) -> None:
    alice = token_for(server, "alice")
    with receiver() as elsewhere:
        moved = (302, {"Location": elsewhere.url}, 0.0)
        with receiver(lambda n: moved) as hook, server.client() as http:
            created = subscribe(http, alice, hook.url)
            assert (
                http.post("/plants", json={"id": 1, "name": "F"}, headers=alice).status_code == 200
            )
            [delivery] = wait_until(
                lambda: [
                    d for d in deliveries(http, alice, created["id"]) if d["status"] == "failed"
                ]
            )
            assert delivery["last_status"] == 302
            assert len(hook.snapshot()) == len(FAST_RETRIES.split(","))
        assert elsewhere.snapshot() == []


def test_attempt_log_lines_show_only_scheme_host_and_port(server: LiveServer) -> None:
    """Receivers keep secrets in the path and query (Slack, Zapier): the log never shows them."""
    alice = token_for(server, "alice")
    with receiver() as hook, server.client() as http:
        origin = "/".join(hook.url.split("/")[:3])
        secret_url = f"{origin}/services/T0PATHSECRET/B0PATHSECRET?token=QUERYSECRET"
        created = subscribe(http, alice, secret_url)
        assert http.post("/plants", json={"id": 1, "name": "F"}, headers=alice).status_code == 200
        [message] = hook.wait_for(1)
        assert message.path.startswith("/services/T0PATHSECRET")  # it went where it was told

        def logged() -> list[dict[str, Any]]:
            text = server.log_path.read_text()
            return [
                json.loads(line)
                for line in text.splitlines()
                if '"logger":"plantstore.webhooks"' in line and '"webhook attempt"' in line
            ]

        [record] = wait_until(logged)
    assert record["origin"] == origin, record
    assert record["webhook_id"] == message.headers["webhook-id"]
    assert (record["subscription_id"], record["attempt"]) == (created["id"], 1)
    assert (record["status"], record["error"], record["outcome"]) == (200, None, "delivered")
    assert record["level"] == "info"
    assert record["timestamp"].endswith("Z")
    text = server.log_path.read_text()
    assert "PATHSECRET" not in text
    assert "QUERYSECRET" not in text


def test_attempt_lines_follow_the_log_level_not_the_access_log(tmp_path: Path) -> None:
    """Attempt lines are records at info: a server logging warnings and up writes none,
    one with the access log off still writes them."""
    quiet_url = f"sqlite:///{tmp_path / 'quiet.db'}"
    quiet = start_server(
        quiet_url, tmp_path / "quiet.log", **PRIVATE_OK, PLANTSTORE_LOG_LEVEL="warning"
    )
    no_access_url = f"sqlite:///{tmp_path / 'no-access.db'}"
    no_access = start_server(
        no_access_url, tmp_path / "no-access.log", **PRIVATE_OK, PLANTSTORE_ACCESS_LOG="false"
    )
    try:
        for number, server in enumerate((quiet, no_access)):
            alice = token_for(server, "alice")
            with receiver() as hook, server.client() as http:
                subscribe(http, alice, hook.url)
                plant = {"id": number, "name": "F"}
                assert http.post("/plants", json=plant, headers=alice).status_code == 200
                hook.wait_for(1)
    finally:
        stop_server(quiet)
        stop_server(no_access)
    assert '"webhook attempt"' not in quiet.log_path.read_text()
    assert no_access.log_path.read_text().count('"event":"webhook attempt"') == 1
    assert '"logger":"plantstore.access"' not in no_access.log_path.read_text()


def test_racing_creates_do_not_pass_the_subscription_cap(server: LiveServer) -> None:
    """32 creates sent at once (warm connections, released together), for a cap of 10:
    exactly 10 are made, however the count and the inserts interleave."""
    alice = token_for(server, "alice")
    racers = 32
    start = threading.Barrier(racers)
    with receiver() as hook:

        def create(number: int) -> int:
            with server.client() as http:
                assert http.get("/webhooks", headers=alice).status_code == 200
                start.wait()
                url = f"{hook.url}?n={number}"
                return http.post("/webhooks", json={"url": url}, headers=alice).status_code

        with ThreadPoolExecutor(max_workers=racers) as pool:
            statuses = list(pool.map(create, range(racers)))
        with server.client() as http:
            listed = http.get("/webhooks", headers=alice).json()
    assert sorted(statuses) == [200] * 10 + [403] * (racers - 10)
    assert len(listed) == 10


def test_operator_list_shows_and_filters_by_issuer(server: LiveServer) -> None:
    """An operator user and a JWT issuer's user may share a name: ``webhook list`` tells
    them apart (ISSUER) and keeps one with --operator or --issuer URL."""
    alice = token_for(server, "alice")
    issuer = "https://idp.example.com/"
    with server.client() as http:
        mine = subscribe(http, alice, "https://8.8.8.8/operator-alice")
    run_sql(
        server.db_url,
        f"INSERT INTO users (name, issuer, created_at) VALUES ('alice', '{issuer}', 0)",
    )
    run_sql(
        server.db_url,
        "INSERT INTO webhook_subscriptions (user_id, url, events, secret, enabled, created_at) "
        "SELECT id, 'https://8.8.8.8/jwt-alice', 3, "
        f"'whsec_{'A' * 43}=', true, 0 FROM users WHERE name = 'alice' AND issuer = '{issuer}'",
    )
    table = run_cli(server.db_url, "webhook", "list", "alice")
    assert table.splitlines()[0].split()[:3] == ["ID", "USER", "ISSUER"]
    rows = {line.split()[3]: line.split()[2] for line in table.splitlines()[1:]}
    assert rows == {
        "https://8.8.8.8/operator-alice": "(operator)",
        "https://8.8.8.8/jwt-alice": issuer,
    }
    operator = run_cli(server.db_url, "webhook", "list", "alice", "--operator", "--json")
    assert [json.loads(line)["id"] for line in operator.splitlines()] == [mine["id"]]
    assert json.loads(operator)["url"] == "https://8.8.8.8/operator-alice"
    from_idp = run_cli(server.db_url, "webhook", "list", "alice", "--issuer", issuer, "--json")
    assert [json.loads(line)["url"] for line in from_idp.splitlines()] == [
        "https://8.8.8.8/jwt-alice"
    ]
    assert run_cli(server.db_url, "webhook", "list", "--issuer", "https://other.example/") == (
        "ID  USER  ISSUER  URL  EVENTS  ENABLED  CREATED  DISABLED BECAUSE\n"
    )
