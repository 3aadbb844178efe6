"""DELETE /plants/{id}: 204 for the caller's plant, 404 for anything else, 400 for a bad id."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from tests.fixtures.calls import assert_error

# HTTP to the service alone (no in-process app, settings or logs): on the two-worker server too.
pytestmark = pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")

Headers = dict[str, str]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_NAMES_ID = re.compile(r"(?<![A-Za-z])id(?![A-Za-z])")


def create(client: TestClient, headers: Headers, plant_id: int, name: str = "Fern") -> None:
    body: dict[str, Any] = {"id": plant_id, "name": name}
    response = client.post("/plants", json=body, headers=headers)
    assert response.status_code == 200, response.text


def listed(client: TestClient, headers: Headers) -> list[dict[str, str]]:
    response = client.get("/plants", headers=headers)
    assert response.status_code == 200, response.text
    plants: list[dict[str, str]] = response.json()
    return plants


def test_delete_existing_plant_is_204_without_body(client: TestClient, alice: Headers) -> None:
    create(client, alice, 1, "Monstera")
    create(client, alice, 2, "Fern")
    response = client.delete("/plants/1", headers=alice)
    assert response.status_code == 204
    assert response.content == b""
    assert listed(client, alice) == [{"name": "Fern"}]


def test_delete_again_is_404(client: TestClient, alice: Headers) -> None:
    create(client, alice, 1)
    assert client.delete("/plants/1", headers=alice).status_code == 204
    assert_error(client.delete("/plants/1", headers=alice), 404)
    assert listed(client, alice) == []


def test_deleted_id_can_be_created_again(client: TestClient, alice: Headers) -> None:
    create(client, alice, 1, "Monstera")
    assert client.delete("/plants/1", headers=alice).status_code == 204
    create(client, alice, 1, "Cactus")
    assert listed(client, alice) == [{"name": "Cactus"}]


@pytest.mark.parametrize("path_id", ["1", "2", "-1", "0", str(INT64_MAX), str(INT64_MIN)])
def test_delete_never_existing_plant_is_404(
    client: TestClient, alice: Headers, path_id: str
) -> None:
    create(client, alice, 3)
    assert_error(client.delete(f"/plants/{path_id}", headers=alice), 404)
    assert listed(client, alice) == [{"name": "Fern"}]


def test_delete_with_no_plants_at_all_is_404(client: TestClient, alice: Headers) -> None:
    assert_error(client.delete("/plants/1", headers=alice), 404)


def test_another_users_plant_is_404_and_survives(
    client: TestClient, alice: Headers, bob: Headers
) -> None:
    create(client, bob, 7, "Bob's fern")
    assert_error(client.delete("/plants/7", headers=alice), 404)
    assert listed(client, bob) == [{"name": "Bob's fern"}]
    assert client.delete("/plants/7", headers=bob).status_code == 204
    assert listed(client, bob) == []


def test_404_for_another_users_plant_looks_like_never_existed(
    client: TestClient, alice: Headers, bob: Headers
) -> None:
    create(client, bob, 7)
    theirs = client.delete("/plants/7", headers=alice)
    nobodys = client.delete("/plants/8", headers=alice)
    assert_error(theirs, 404)
    assert_error(nobodys, 404)
    assert theirs.json()["message"].replace("7", "8") == nobodys.json()["message"]


def test_delete_removes_only_the_callers_plant_with_a_shared_id(
    client: TestClient, alice: Headers, bob: Headers
) -> None:
    create(client, alice, 7, "Alice's fern")
    create(client, bob, 7, "Bob's fern")
    assert client.delete("/plants/7", headers=alice).status_code == 204
    assert listed(client, alice) == []
    assert listed(client, bob) == [{"name": "Bob's fern"}]


@pytest.mark.parametrize(
    ("path_id", "plant_id"),
    [
        ("-5", -5),
        ("0", 0),
        ("-0", 0),
        ("007", 7),
        ("-007", -7),
        ("00000000000000000000000000042", 42),
        (str(INT64_MAX), INT64_MAX),
        (str(INT64_MIN), INT64_MIN),
        ("0" + str(INT64_MAX), INT64_MAX),
    ],
)
def test_valid_ids(client: TestClient, alice: Headers, path_id: str, plant_id: int) -> None:
    create(client, alice, plant_id, "Target")
    create(client, alice, 12345, "Bystander")
    response = client.delete(f"/plants/{path_id}", headers=alice)
    assert response.status_code == 204, response.text
    assert response.content == b""
    assert listed(client, alice) == [{"name": "Bystander"}]
    assert_error(client.delete(f"/plants/{path_id}", headers=alice), 404)


@pytest.mark.parametrize(
    "path_id",
    [
        "abc",
        "1.5",
        "1.0",
        "+1",
        "1e3",
        "0x10",
        "--1",
        "-",
        " 1",
        "1 ",
        "1_000",
        "\uff11",  # a fullwidth digit
        "\u0663",  # an Arabic-Indic digit
        str(INT64_MAX + 1),  # 9223372036854775808
        str(INT64_MIN - 1),  # -9223372036854775809
        "123456789012345678901234567890",
        "-123456789012345678901234567890",
    ],
)
def test_invalid_id_is_400_naming_id(client: TestClient, alice: Headers, path_id: str) -> None:
    create(client, alice, 1)
    response = client.delete(f"/plants/{quote(path_id, safe='')}", headers=alice)
    message = assert_error(response, 400)
    assert _NAMES_ID.search(message), message
    assert listed(client, alice) == [{"name": "Fern"}]


def test_empty_id_is_an_unknown_path(client: TestClient, alice: Headers) -> None:
    create(client, alice, 1)
    assert_error(client.delete("/plants/", headers=alice), 404)
    assert_error(client.delete("/plants/"), 404)
    assert listed(client, alice) == [{"name": "Fern"}]
