"""The quick start, over the in-process client and a real server."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from tests.fixtures.calls import bearer
from tests.fixtures.servers import LiveServer

# HTTP to the service alone (no in-process app, settings or logs): on the two-worker server too.
pytestmark = pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")


def test_create_list_delete_in_process(client: TestClient, alice: dict[str, str]) -> None:
    created = client.post(
        "/plants", json={"id": 1, "name": "Monstera", "tag": "tropical"}, headers=alice
    )
    assert created.status_code == 200
    assert created.json() == {"name": "Monstera", "tag": "tropical"}
    assert client.get("/plants", headers=alice).json() == [{"name": "Monstera", "tag": "tropical"}]
    assert client.delete("/plants/1", headers=alice).status_code == 204
    assert client.get("/plants", headers=alice).json() == []


def test_create_list_delete_over_http(live_server: LiveServer) -> None:
    headers = bearer(live_server.token)
    with live_server.client() as http:
        created = http.post("/plants", json={"id": 424242, "name": "Fern"}, headers=headers)
        assert created.status_code == 200
        assert created.json() == {"name": "Fern"}
        assert {"name": "Fern"} in http.get("/plants", headers=headers).json()
        assert http.delete("/plants/424242", headers=headers).status_code == 204
