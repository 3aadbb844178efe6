"""SIGKILLs with a subscriber attached: every change that was stored is delivered at least
once after the restarts, and nothing is delivered for a change that was never stored.

The torture engine (trials/torture/) judges the plants themselves; this test adds the events.
The outbox is written by triggers, so each stored change has exactly one delivery row. The
checks: every delivery row ends delivered and reached the receiver (signed); per plant,
the events in commit order alternate created, deleted, created, ..., and the last one
agrees with the final listing (present: created with the listed name and tag)."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

import pytest
import standardwebhooks

from tests import pg
from tests.fixtures.calls import bearer, run_cli, token_from_output
from tests.fixtures.servers import start_server, stop_server
from tests.webhooks.webhook_receiver import receiver
from trials.torture.config import TortureConfig
from trials.torture.engine import run_torture

pytestmark = pytest.mark.server

KILLS = 10
USERS = 3
ENV = {
    "PLANTSTORE_WEBHOOK_ALLOW_PRIVATE": "true",
    "PLANTSTORE_WEBHOOK_RETRY_SCHEDULE": "0s,1s,1s,1s,1s",
}
DELIVERIES = (
    "SELECT d.msg_id, d.id, u.name, d.event_type, d.plant_id, d.name, d.tag, d.state "
    "FROM webhook_deliveries d JOIN users u ON u.id = d.user_id ORDER BY d.id"
)


def query(db_url: str, statement: str) -> list[tuple[object, ...]]:
    if db_url.startswith("sqlite:///"):
        path = db_url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path, timeout=10)) as conn:
            return list(conn.execute(statement))
    return pg.run_sql(db_url, statement)[0]


@pytest.mark.timeout(600)
def test_sigkill_torture_with_a_subscriber(backend: str, db_url: str, tmp_path: Path) -> None:
    with receiver() as hook:
        setup = start_server(db_url, tmp_path / "setup.log", **ENV)
        secrets: dict[str, str] = {}
        with setup.client() as http:
            for user in (f"torture-{n}" for n in range(USERS)):
                auth = bearer(token_from_output(run_cli(db_url, "token", "create", user)))
                answer = http.post("/webhooks", json={"url": f"{hook.url}/{user}"}, headers=auth)
                assert answer.status_code == 200, answer.text
                secrets[user] = answer.json()["secret"]
        stop_server(setup)

        config = TortureConfig(
            database_url=db_url,
            workdir=tmp_path,
            kills=KILLS,
            clients=6,
            users=USERS,
            tokens_per_user=1,
            workers=1,
            startup_kill_chance=0.0,
            server_env=ENV,
            progress=print,
        )
        result = run_torture(config)
        assert result.passed, result.findings()

        # One more start to send what the last kill left queued; then everything is sent.
        final = start_server(db_url, tmp_path / "final.log", **ENV)
        try:
            deadline = time.monotonic() + 120
            while query(db_url, "SELECT count(*) FROM webhook_deliveries WHERE state <> 1")[0][0]:
                assert time.monotonic() < deadline, "deliveries still pending"
                time.sleep(0.2)
            listings = {user: _listing(final.base_url, db_url, user) for user in secrets}
        finally:
            stop_server(final)
        received = hook.snapshot()

    rows = query(db_url, DELIVERIES)
    assert rows, "the torture stored changes, so there are events"
    by_msg = {str(row[0]): row for row in rows}
    got: dict[str, int] = {}
    for message in received:
        user = message.path.rsplit("/", 1)[1]
        event = standardwebhooks.Webhook(secrets[user]).verify(message.body, message.headers)
        row = by_msg[message.headers["webhook-id"]]  # never an event without a stored change
        assert (row[2], row[3], row[4], row[5]) == (
            user,
            event["type"],
            event["data"]["id"],
            event["data"]["name"],
        )
        got[str(row[0])] = got.get(str(row[0]), 0) + 1
    assert set(got) == set(by_msg), "every stored change was delivered"
    duplicates = sum(got.values()) - len(got)
    print(f"{len(rows)} events, {duplicates} delivered more than once")

    history: dict[tuple[str, int], list[tuple[object, ...]]] = {}
    for row in rows:
        history.setdefault((str(row[2]), int(row[4])), []).append(row)  # type: ignore[call-overload]
    for (user, plant_id), events in history.items():
        types = [event[3] for event in events]
        assert types == ["plant.created", "plant.deleted"] * (len(types) // 2) + (
            ["plant.created"] if len(types) % 2 else []
        ), (user, plant_id, types)
        last = events[-1]
        listed = listings[user].get(plant_id)
        if last[3] == "plant.created":
            assert listed == (last[5], last[6]), (user, plant_id, listed, last)
        else:
            assert listed is None, (user, plant_id, listed)


def _listing(base_url: str, db_url: str, user: str) -> dict[int, tuple[object, object]]:
    """The user's plants with their ids, read from the database (the API shows no ids)."""
    rows = query(
        db_url,
        "SELECT p.id, p.name, p.tag FROM plants p JOIN users u ON u.id = p.user_id "
        f"WHERE u.name = '{user}'",
    )
    return {int(row[0]): (row[1], row[2]) for row in rows}  # type: ignore[call-overload]
