"""A hypothesis state machine: two users create, list (page by page) and delete plants, and
every answer is checked against an in-memory model of what each user owns."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from starlette.testclient import TestClient

from plantstore.app import create_app
from plantstore.settings import Settings
from tests.fixtures.backends import emptied_shared_database
from tests.fixtures.calls import bearer, run_cli, token_from_output

USERS = ("alice", "bob")
plant_ids = st.integers(min_value=-3, max_value=12) | st.sampled_from([-(2**63), 2**63 - 1])
names = st.sampled_from(["Fern", "Monstera", "Ficus", "Ivy 🌿"])
tags = st.none() | st.sampled_from(["green", "tropical"])
LINK = re.compile(r'^<([^>]+)>; rel="next"$')


class PlantStoreMachine(RuleBasedStateMachine):
    def __init__(self, empty_database: Callable[[], str]) -> None:
        super().__init__()
        db_url = empty_database()
        self.headers = {
            user: bearer(token_from_output(run_cli(db_url, "token", "create", user)))
            for user in USERS
        }
        self.client = TestClient(create_app(Settings(database_url=db_url, page_cap=4)))
        self.client.__enter__()
        self.model: dict[str, dict[int, tuple[str, str | None]]] = {user: {} for user in USERS}

    def teardown(self) -> None:
        self.client.__exit__(None, None, None)

    @rule(user=st.sampled_from(USERS), plant_id=plant_ids, name=names, tag=tags)
    def create(self, user: str, plant_id: int, name: str, tag: str | None) -> None:
        body: dict[str, object] = {"id": plant_id, "name": name}
        if tag is not None:
            body["tag"] = tag
        response = self.client.post("/plants", json=body, headers=self.headers[user])
        owned = self.model[user]
        if plant_id in owned and owned[plant_id] != (name, tag):
            assert response.status_code == 409
            assert response.json()["error"] == 409
            return
        assert response.status_code == 200
        assert response.json() == {k: v for k, v in body.items() if k != "id"}
        owned[plant_id] = (name, tag)

    @rule(user=st.sampled_from(USERS), plant_id=plant_ids)
    def delete(self, user: str, plant_id: int) -> None:
        response = self.client.delete(f"/plants/{plant_id}", headers=self.headers[user])
        if self.model[user].pop(plant_id, None) is None:
            assert response.status_code == 404
        else:
            assert response.status_code == 204
            assert response.content == b""

    @rule(user=st.sampled_from(USERS), limit=st.integers(min_value=1, max_value=6))
    def list_every_page(self, user: str, limit: int) -> None:
        url: str | None = f"/plants?limit={limit}"
        seen: list[dict[str, str]] = []
        while url is not None:
            response = self.client.get(url, headers=self.headers[user])
            assert response.status_code == 200
            page = response.json()
            assert len(page) <= min(limit, 4)
            seen.extend(page)
            link = response.headers.get("link")
            match = LINK.match(link) if link else None
            assert link is None or match is not None
            url = match.group(1) if match else None
        assert seen == self.expected(user)

    @invariant()
    def first_page_matches_model(self) -> None:
        for user in USERS:
            response = self.client.get("/plants", headers=self.headers[user])
            assert response.json() == self.expected(user)[:4]

    def expected(self, user: str) -> list[dict[str, str]]:
        plants = []
        for _, (name, tag) in sorted(self.model[user].items()):
            plants.append({"name": name} if tag is None else {"name": name, "tag": tag})
        return plants


def test_the_service_behaves_like_the_model(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    numbers = itertools.count()

    def empty_database() -> str:
        if backend == "sqlite":
            return f"sqlite:///{tmp_path / f'machine-{next(numbers)}.db'}"
        return emptied_shared_database(request)

    class MachineOnThisBackend(PlantStoreMachine):
        def __init__(self) -> None:
            super().__init__(empty_database)

    run_state_machine_as_test(
        MachineOnThisBackend,
        settings=settings(
            max_examples=25,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
