"""The plant routes' own dispatcher: exact matches are served past Starlette's router, every
near miss still gets Starlette's answer, and a request under a root path is routed by Starlette.
"""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from plantstore.app import create_app
from plantstore.settings import Settings
from tests.fixtures.calls import assert_error

Headers = dict[str, str]


@pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")
def test_near_misses_of_the_plant_routes_get_starlettes_404_and_405(
    client: TestClient, alice: Headers
) -> None:
    assert_error(client.delete("/plants/1/2", headers=alice), 404)
    assert_error(client.delete("/plants/", headers=alice), 404)
    assert_error(client.get("/plants/", headers=alice), 404)
    assert_error(client.get("/plantsx", headers=alice), 404)
    wrong_method = client.put("/plants/7", headers=alice)
    assert_error(wrong_method, 405)
    assert wrong_method.headers["allow"] == "DELETE"
    on_collection = client.delete("/plants", headers=alice)
    assert_error(on_collection, 405)
    assert set(on_collection.headers["allow"].replace(" ", "").split(",")) == {
        "GET",
        "HEAD",
        "POST",
    }


@pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")
def test_head_on_the_collection_is_answered_by_starlette_without_a_body(
    client: TestClient, alice: Headers
) -> None:
    response = client.head("/plants", headers=alice)
    assert response.status_code == 200
    assert response.content == b""


def test_a_fault_in_a_dispatched_handler_is_a_500_error_body(
    settings: Settings, alice: Headers
) -> None:
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        plants = app.state.features.plants
        plants._authenticate = None  # every plant handler now fails on its first line
        response = client.get("/plants", headers=alice)
    assert assert_error(response, 500) == "internal server error"


def test_under_a_root_path_the_plant_routes_are_routed_by_starlette(
    settings: Settings, alice: Headers
) -> None:
    with TestClient(create_app(settings), root_path="/api") as client:
        created = client.post("/plants", headers=alice, json={"id": 1, "name": "Fern"})
        listed = client.get("/plants", headers=alice)
        deleted = client.delete("/plants/1", headers=alice)
    assert created.status_code == 200, created.text
    assert listed.json() == [{"name": "Fern"}]
    assert deleted.status_code == 204
