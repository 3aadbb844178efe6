"""Two instances on one PostgreSQL database share the dispatch: every event is delivered,
few twice, and each instance sends some of them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests import pg
from tests.fixtures.calls import bearer, run_cli, token_from_output
from tests.fixtures.servers import start_server, stop_server
from tests.webhooks.webhook_receiver import receiver

pytestmark = pytest.mark.server

EVENTS = 300


def test_two_instances_share_delivery_without_losing_events(
    postgres: pg.PostgresServer, tmp_path: Path
) -> None:
    db_url = postgres.create_database()
    env = {"PLANTSTORE_WEBHOOK_ALLOW_PRIVATE": "true", "PLANTSTORE_WEBHOOK_RETRY_SCHEDULE": "0s,1s"}
    servers = [start_server(db_url, tmp_path / f"server-{n}.log", **env) for n in (1, 2)]
    try:
        alice = bearer(token_from_output(run_cli(db_url, "token", "create", "alice")))
        # A receiver that takes a little while, so that neither instance can keep up alone.
        with receiver(lambda n: (200, {}, 0.03)) as hook:
            clients = [server.client() for server in servers]
            response = clients[0].post("/webhooks", json={"url": hook.url}, headers=alice)
            assert response.status_code == 200, response.text
            for plant_id in range(EVENTS // 3 * 2):
                http = clients[plant_id % 2]
                plant = {"id": plant_id, "name": f"p{plant_id}"}
                assert http.post("/plants", json=plant, headers=alice).status_code == 200
            for plant_id in range(EVENTS // 3):
                http = clients[plant_id % 2 - 1]
                assert http.delete(f"/plants/{plant_id}", headers=alice).status_code == 204
            unique: set[str] = set()
            while len(unique) < EVENTS:
                received = hook.wait_for(len(unique) + 1)
                unique = {message.headers["webhook-id"] for message in received}
            for client in clients:
                client.close()
    finally:
        for server in servers:
            stop_server(server)
    events = Counter(
        (json.loads(m.body)["type"], json.loads(m.body)["data"]["id"]) for m in received
    )
    expected = {("plant.created", n) for n in range(EVENTS // 3 * 2)} | {
        ("plant.deleted", n) for n in range(EVENTS // 3)
    }
    assert set(events) == expected
    duplicates = len(received) - len(unique)
    assert duplicates <= EVENTS // 20, f"{duplicates} duplicates"
    sent_by = [server.log_path.read_text().count('"event":"webhook attempt"') for server in servers]
    assert all(sent_by), f"attempts per instance: {sent_by}"
