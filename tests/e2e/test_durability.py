"""A 200 means the write is on disk: acknowledged creates survive SIGKILL of the server."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.fixtures.backends import new_database_url
from tests.fixtures.calls import bearer
from tests.fixtures.servers import all_plants, kill_server, start_server, stop_server

pytestmark = pytest.mark.server


def test_acknowledged_create_survives_an_immediate_kill(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db_url = new_database_url(backend, tmp_path, request)
    server = start_server(db_url, tmp_path / "first.log")
    with server.client() as http:
        response = http.post(
            "/plants",
            json={"id": 1, "name": "Survivor", "tag": "hardy"},
            headers=bearer(server.token),
        )
    assert response.status_code == 200
    kill_server(server)  # the very next instant: no shutdown, no checkpoint
    restarted = start_server(db_url, tmp_path / "second.log")
    try:
        assert all_plants(restarted, server.token) == [{"name": "Survivor", "tag": "hardy"}]
    finally:
        stop_server(restarted)


IDS = 5_000  # ids 0..4999 are queued; the kill comes after ACKNOWLEDGED of them are stored
ACKNOWLEDGED = 1_000
DEADLINE = 60.0  # seconds to get there (a few on an idle machine)


def test_kill_during_concurrent_creates_loses_no_acknowledged_write(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db_url = new_database_url(backend, tmp_path, request)
    server = start_server(db_url, tmp_path / "first.log")
    token = server.token
    acknowledged: set[int] = set()
    sent: set[int] = set()  # creates that may have reached the server
    answers: Counter[int | str] = Counter()
    killed = threading.Event()

    http = httpx.Client(
        base_url=server.base_url, timeout=5, limits=httpx.Limits(max_connections=32)
    )

    def create(plant_id: int) -> None:
        if killed.is_set():
            return  # never sent: so it must never be stored
        sent.add(plant_id)
        try:
            response = http.post(
                "/plants", json={"id": plant_id, "name": f"p{plant_id}"}, headers=bearer(token)
            )
        except httpx.TransportError as exc:
            answers[type(exc).__name__] += 1
            return  # cut off by the kill: not acknowledged, so either outcome is allowed
        answers[response.status_code] += 1
        if response.status_code == 200:
            acknowledged.add(plant_id)

    with ThreadPoolExecutor(max_workers=32) as pool:
        futures = [pool.submit(create, plant_id) for plant_id in range(IDS)]
        deadline = time.monotonic() + DEADLINE
        while len(acknowledged) < ACKNOWLEDGED:
            if time.monotonic() > deadline or all(future.done() for future in futures):
                stalled = (
                    f"only {len(acknowledged)} of {ACKNOWLEDGED} creates acknowledged in "
                    f"{DEADLINE:.0f} s, before any kill; answers so far: {dict(answers)}"
                )
                killed.set()
                kill_server(server)
                pytest.fail(stalled)
            time.sleep(0.01)
        killed.set()  # from here on no create is sent: the later ids stay unsent
        kill_server(server)
        for future in futures:
            future.result()
    http.close()

    restarted = start_server(db_url, tmp_path / "second.log")
    try:
        names = [plant["name"] for plant in all_plants(restarted, token)]
    finally:
        stop_server(restarted)
    stored = {int(name[1:]) for name in names}
    assert len(acknowledged) >= ACKNOWLEDGED
    assert acknowledged <= stored, f"lost acknowledged writes: {sorted(acknowledged - stored)[:10]}"
    # Meaningful only because some ids were never sent (the kill came first): a plant with
    # one of those ids is a write that no request asked for.
    never_sent = set(range(IDS)) - sent
    assert never_sent, "every id was sent before the kill: nothing left to check against"
    assert stored <= sent, f"plants never sent are stored: {sorted(stored - sent)[:10]}"
    assert len(names) == len(stored), "a plant is listed twice"
    if backend == "sqlite":
        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
