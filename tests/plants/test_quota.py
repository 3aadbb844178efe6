"""The per-user plant quota: a create past it is a 403 with the Error body, and nothing else
changes: repeats, conflicts, deletes and other users behave as without it."""

from __future__ import annotations

import asyncio

import pytest
from starlette.testclient import TestClient

from plantstore.app import create_app
from plantstore.plants.store import CreateOutcome, PlantRecord
from plantstore.settings import Settings
from tests.fixtures.calls import IssueToken, assert_error, bearer
from tests.stores import Stores

Headers = dict[str, str]
QUOTA = 3


def quota_client(db_url: str) -> TestClient:
    settings = Settings(database_url=db_url, max_plants_per_user=QUOTA)
    return TestClient(create_app(settings), raise_server_exceptions=False)


def names(client: TestClient, headers: Headers) -> list[str]:
    return [plant["name"] for plant in client.get("/plants", headers=headers).json()]


def test_a_create_past_the_quota_is_a_403_and_stores_nothing(
    db_url: str, issue_token: IssueToken
) -> None:
    alice = bearer(issue_token("alice"))
    with quota_client(db_url) as client:
        for plant_id in range(QUOTA):
            body = {"id": plant_id, "name": f"p{plant_id}"}
            assert client.post("/plants", headers=alice, json=body).status_code == 200
        refused = client.post("/plants", headers=alice, json={"id": 99, "name": "one too many"})
        assert_error(refused, 403, "quota", f"you already hold {QUOTA} plants")
        assert names(client, alice) == ["p0", "p1", "p2"]


def test_at_the_quota_repeats_conflicts_and_other_users_are_unchanged(
    db_url: str, issue_token: IssueToken
) -> None:
    alice, bob = bearer(issue_token("alice")), bearer(issue_token("bob"))
    with quota_client(db_url) as client:
        for plant_id in range(QUOTA):
            client.post("/plants", headers=alice, json={"id": plant_id, "name": f"p{plant_id}"})
        repeat = client.post("/plants", headers=alice, json={"id": 0, "name": "p0"})
        assert repeat.status_code == 200, repeat.text
        assert_error(client.post("/plants", headers=alice, json={"id": 0, "name": "x"}), 409)
        assert client.post("/plants", headers=bob, json={"id": 0, "name": "b"}).status_code == 200


def test_a_delete_makes_room_again(db_url: str, issue_token: IssueToken) -> None:
    alice = bearer(issue_token("alice"))
    with quota_client(db_url) as client:
        for plant_id in range(QUOTA):
            client.post("/plants", headers=alice, json={"id": plant_id, "name": f"p{plant_id}"})
        assert client.delete("/plants/1", headers=alice).status_code == 204
        fresh = client.post("/plants", headers=alice, json={"id": 7, "name": "room again"})
        assert fresh.status_code == 200, fresh.text
        assert_error(client.post("/plants", headers=alice, json={"id": 8, "name": "no"}), 403)
        assert names(client, alice) == ["p0", "p2", "room again"]


def test_racing_creates_never_pass_the_quota(db_url: str, issue_token: IssueToken) -> None:
    issue_token("alice")  # user 1 holds the token; the store is used directly below
    settings = Settings(database_url=db_url, max_plants_per_user=5)

    async def race() -> list[CreateOutcome]:
        stores = [Stores(settings) for _ in range(2)]
        for store in stores:
            await store.open()
        try:
            user_id = (await stores[0].tokens.list_tokens("alice"))[0].user_id
            creates = [
                stores[i % 2].plants.create_plant(user_id, PlantRecord(i, f"p{i}", None))
                for i in range(20)
            ]
            return await asyncio.gather(*creates)
        finally:
            for store in stores:
                await store.close()

    outcomes = asyncio.run(race())
    assert outcomes.count(CreateOutcome.CREATED) == 5
    assert outcomes.count(CreateOutcome.OVER_QUOTA) == 15


@pytest.mark.backends("sqlite", "postgres", "sqlite-2workers")
def test_the_document_shows_the_quota_answer(client: TestClient) -> None:
    create = client.get("/openapi.json").json()["paths"]["/plants"]["post"]
    assert "quota" in create["responses"]["403"]["description"].lower()
