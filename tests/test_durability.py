"""A 200 means the write is on disk: acknowledged creates survive SIGKILL of the server."""

from __future__ import annotations

import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from .conftest import all_plants, bearer, kill_server, new_database_url, start_server, stop_server


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


def test_kill_during_concurrent_creates_loses_no_acknowledged_write(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db_url = new_database_url(backend, tmp_path, request)
    server = start_server(db_url, tmp_path / "first.log")
    token = server.token
    acknowledged: set[int] = set()
    sent: set[int] = set()

    http = httpx.Client(
        base_url=server.base_url, timeout=5, limits=httpx.Limits(max_connections=32)
    )

    def create(plant_id: int) -> None:
        sent.add(plant_id)
        try:
            response = http.post(
                "/plants", json={"id": plant_id, "name": f"p{plant_id}"}, headers=bearer(token)
            )
        except httpx.TransportError:
            return  # cut off by the kill: not acknowledged, so either outcome is allowed
        if response.status_code == 200:
            acknowledged.add(plant_id)

    with ThreadPoolExecutor(max_workers=32) as pool:
        futures = [pool.submit(create, plant_id) for plant_id in range(5_000)]
        while len(acknowledged) < 1_000:
            time.sleep(0.01)
        kill_server(server)
        for future in futures:
            future.result()
    http.close()

    restarted = start_server(db_url, tmp_path / "second.log")
    try:
        stored = {int(plant["name"][1:]) for plant in all_plants(restarted, token)}
    finally:
        stop_server(restarted)
    assert len(acknowledged) >= 1_000
    assert acknowledged <= stored, f"lost acknowledged writes: {sorted(acknowledged - stored)[:10]}"
    assert stored <= sent, "a plant appeared that was never sent"
    if backend == "sqlite":
        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
